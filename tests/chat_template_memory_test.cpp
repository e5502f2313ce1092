// Chat templates' memory: rendering sizes every value before allocating it, so the
// heap's peak during a render stays near TemplateLimits::max_built_bytes even when a
// template doubles a value until the limit stops it (issue 33: charged after the
// fact, a 256 MB limit saw 1.3 GB peaks). The live heap is measured by replacing
// global operator new in this program, which is why it is a program of its own.
#include <gtest/gtest.h>

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "kvdecode/chat/chat_template.hpp"

namespace {
std::atomic<long long> g_live{0}, g_peak{0};

void note_alloc(void* p) {
  const long long now = g_live.fetch_add(static_cast<long long>(malloc_usable_size(p))) +
                        static_cast<long long>(malloc_usable_size(p));
  long long peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}
void note_free(void* p) {
  if (p) g_live.fetch_sub(static_cast<long long>(malloc_usable_size(p)));
}
}  // namespace

// The replacements pair malloc/aligned_alloc with free, which GCC cannot see through
// when it checks new/delete pairs.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  note_alloc(p);
  return p;
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, std::align_val_t al) {
  const std::size_t a = static_cast<std::size_t>(al);
  void* p = std::aligned_alloc(a, (n + a - 1) / a * a);
  if (!p) throw std::bad_alloc();
  note_alloc(p);
  return p;
}
void* operator new[](std::size_t n, std::align_val_t al) { return operator new(n, al); }
void operator delete(void* p) noexcept { note_free(p); std::free(p); }
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
void operator delete[](void* p, std::size_t) noexcept { operator delete(p); }
void operator delete(void* p, std::align_val_t) noexcept { operator delete(p); }
void operator delete[](void* p, std::align_val_t) noexcept { operator delete(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { operator delete(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { operator delete(p); }

namespace {

constexpr std::uint64_t kLimit = 4u << 20;  // max_built_bytes for these tests

// Renders src under kLimit and returns the heap's peak above where it started;
// the render must fail with a TemplateError naming the limit.
long long peak_of_failing_render(const std::string& src) {
  kvd::TemplateLimits lim;
  lim.max_built_bytes = kLimit;
  kvd::ChatTemplate t = kvd::ChatTemplate::parse(src, "t", lim);
  t.set_limits(lim);
  const long long start = g_live.load();
  g_peak.store(start);
  try {
    t.render({{"user", "hi"}}, true);
    ADD_FAILURE() << "no TemplateError for: " << src;
  } catch (const kvd::TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("limit of 4194304 bytes"), std::string::npos) << e.what();
  }
  return g_peak.load() - start;
}

// Live values never exceed what was charged (<= kLimit); strings that grow by
// appending may hold up to twice their size, and the error text is small.
constexpr long long kAllowed = static_cast<long long>(kLimit) * 3 / 2;

#define EXPECT_BOUNDED_PEAK(loop_body)                                                                      \
  do {                                                                                                     \
    const long long peak_ = peak_of_failing_render("{% set ns = namespace(s='x' * 1000, l=['x' * 1000]) %}" \
                                                   "{% for i in range(40) %}" loop_body "{% endfor %}");   \
    EXPECT_LE(peak_, kAllowed) << "peak " << peak_ << " bytes for a limit of " << kLimit;                  \
  } while (0)

TEST(ChatTemplateMemory, CounterSeesAllocations) {
  const long long before = g_live.load();
  std::string* s = new std::string(1 << 20, 'x');
  EXPECT_GE(g_live.load() - before, 1 << 20);
  delete s;
  EXPECT_EQ(g_live.load(), before);
}
TEST(ChatTemplateMemory, ConcatenationDoubling) { EXPECT_BOUNDED_PEAK("{% set ns.s = ns.s ~ ns.s %}"); }
TEST(ChatTemplateMemory, AdditionDoubling) { EXPECT_BOUNDED_PEAK("{% set ns.s = ns.s + ns.s %}"); }
TEST(ChatTemplateMemory, JoinDoubling) { EXPECT_BOUNDED_PEAK("{% set ns.s = [ns.s, ns.s] | join(ns.s) %}"); }
TEST(ChatTemplateMemory, RepetitionDoubling) { EXPECT_BOUNDED_PEAK("{% set ns.s = ns.s * 2 %}"); }
TEST(ChatTemplateMemory, ReplaceDoubling) { EXPECT_BOUNDED_PEAK("{% set ns.s = ns.s.replace('x', 'xx') %}"); }
TEST(ChatTemplateMemory, TojsonGrowth) { EXPECT_BOUNDED_PEAK("{% set ns.s = [ns.s, ns.s] | tojson %}"); }
TEST(ChatTemplateMemory, ReprGrowth) { EXPECT_BOUNDED_PEAK("{% set ns.s = [ns.s, ns.s] | string %}"); }
TEST(ChatTemplateMemory, ListDoubling) { EXPECT_BOUNDED_PEAK("{% set ns.l = ns.l + ns.l %}"); }
TEST(ChatTemplateMemory, SetBlockDoubling) { EXPECT_BOUNDED_PEAK("{% set b %}{{ ns.s }}{{ ns.s }}{% endset %}{% set ns.s = b %}"); }

}  // namespace
