#!/usr/bin/env bash
# A dispatch build (dispatch.hpp) over the x86-64 baseline must run on every x86-64
# CPU until a level is picked. Two rules, checked on the disassembly:
#   - instructions beyond x86-64 (VEX and EVEX encodings, mask registers, BMI,
#     LZCNT, MOVBE) appear only in a level's own code, the functions of namespace
#     kvd_level_<id>: an inline function compiled for a level and kept by the linker
#     in place of the baseline's copy would break this;
#   - no code outside a level calls or jumps into one directly (a static
#     initializer of a level's file would, before the CPU is known): level code is
#     reached only through the pointers of kvd_isa::LevelKernels.
# Each violation is named with its function.
#
#   tests/dispatch_binary_test.sh BINARY...
set -euo pipefail
command -v objdump >/dev/null || { echo "objdump (binutils) is missing"; exit 1; }
status=0
for bin in "$@"; do
  report=$(objdump -d --no-show-raw-insn -C "$bin" | awk '
    /^[0-9a-f]+ <.*>:$/ { fn = substr($0, index($0, "<") + 1); sub(/>:$/, "", fn); next }
    $1 ~ /^[0-9a-f]+:$/ && NF >= 2 {
      mn = $2
      beyond = (mn ~ /^v[a-z]/ && mn !~ /^ver[rw]$/) || mn ~ /^k(mov|and|or|xor|xnor|not|shift|test|add|unpck)/ ||
               mn ~ /^(shlx|shrx|sarx|rorx|andn|bzhi|pdep|pext|blsi|blsr|blsmsk|lzcnt|movbe|mulx)$/
      if (beyond) {
        if (fn ~ /kvd_level_/) level++
        else if (!(fn in bad)) { bad[fn] = mn; n_bad++ }
      }
      if (mn ~ /^(call|jmp|j[a-z]+)$/ && $0 ~ /<kvd_level_/ && fn !~ /kvd_level_/ && !(fn in bad)) {
        bad[fn] = "a direct " mn " into a level"; n_bad++
      }
    }
    END {
      for (f in bad) print "  outside the levels: " f " (" bad[f] ")"
      print level + 0 " level instructions, " n_bad + 0 " functions outside the levels"
    }')
  echo "$bin: $(tail -1 <<<"$report")"
  if ! tail -1 <<<"$report" | grep -q ', 0 functions outside'; then
    head -n -1 <<<"$report" | head -40
    status=1
  fi
  if tail -1 <<<"$report" | grep -q '^0 level instructions'; then
    echo "  no level code at all: is this a dispatch build?"
    status=1
  fi
done
exit $status
