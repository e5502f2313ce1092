// The programs' shared option table (examples/cli.hpp): parsing of every syntax,
// the llama.cpp aliases, errors that name the option, and a --help that lists
// every option of every program.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "../examples/cli.hpp"

namespace {

using kvd::cli::OptionTable;
using kvd::cli::Params;
using kvd::cli::Program;

constexpr Program kPrograms[] = {kvd::cli::kGenerate, kvd::cli::kCacheReport, kvd::cli::kPlan, kvd::cli::kRoofline,
                                kvd::cli::kTokenize, kvd::cli::kQuantize};

// Parses `args` (argv[0] is supplied) for `program` into a fresh Params.
Params parse(Program program, std::initializer_list<const char*> args) {
  Params p;
  std::vector<const char*> argv{"prog"};
  argv.insert(argv.end(), args.begin(), args.end());
  OptionTable(program, p, "intro").parse(static_cast<int>(argv.size()), argv.data());
  return p;
}

// The message of the ArgumentError that parsing `args` throws ("" if none is thrown).
std::string error_of(Program program, std::initializer_list<const char*> args) {
  try {
    parse(program, args);
  } catch (const kvd::ArgumentError& e) {
    return e.what();
  }
  return "";
}

TEST(CliTable, LongNamesAndBothValueSyntaxes) {
  const Params p = parse(kvd::cli::kGenerate, {"--model", "m.bin", "--steps=12", "--temperature", "0.5", "--top-k",
                                               "40", "--top-p=0.9", "--min-p", "0.05", "--repetition-penalty", "1.3",
                                               "--seed", "7", "--threads", "3", "--cache-dtype", "bf16", "--json",
                                               "--ids", "--no-cache", "--prompt-ids", "1,403,407"});
  ASSERT_TRUE(p.model.has_value());
  EXPECT_EQ(*p.model, "m.bin");
  EXPECT_EQ(p.steps, 12);
  EXPECT_EQ(p.sampler.temperature, 0.5);
  EXPECT_EQ(p.sampler.top_k, 40);
  EXPECT_EQ(p.sampler.top_p, 0.9);
  EXPECT_EQ(p.sampler.min_p, 0.05);
  EXPECT_EQ(p.sampler.repetition_penalty, 1.3);
  EXPECT_EQ(p.seed, 7u);
  EXPECT_EQ(p.threads, 3);
  EXPECT_EQ(p.cache_dtype, "bf16");
  EXPECT_TRUE(p.json);
  EXPECT_TRUE(p.ids);
  EXPECT_TRUE(p.no_cache);
  EXPECT_FALSE(p.quiet);
  ASSERT_TRUE(p.prompt_ids.has_value());
  EXPECT_EQ(*p.prompt_ids, (std::vector<int>{1, 403, 407}));
}

TEST(CliTable, LlamaCppAliasesSetTheSameFields) {
  const Params p = parse(kvd::cli::kGenerate, {"-m", "x.bin", "-p", "Once", "-n", "5", "-t", "2", "-s", "9", "--temp",
                                               "0.7", "--repeat-penalty", "1.1", "--repeat-last-n", "16"});
  EXPECT_EQ(p.model.value_or(""), "x.bin");
  EXPECT_EQ(p.prompt.value_or(""), "Once");
  EXPECT_EQ(p.steps, 5);
  EXPECT_EQ(p.threads, 2);
  EXPECT_EQ(p.seed, 9u);
  EXPECT_EQ(p.sampler.temperature, 0.7);
  EXPECT_EQ(p.sampler.repetition_penalty, 1.1);
  EXPECT_EQ(p.sampler.repetition_last_n, 16);

  const Params plan = parse(kvd::cli::kPlan, {"-c", "8000", "-m", "m.bin"});
  EXPECT_EQ(plan.tokens.value_or(0), 8000u);
  EXPECT_EQ(parse(kvd::cli::kPlan, {"--ctx-size=4096"}).tokens.value_or(0), 4096u);
  EXPECT_EQ(parse(kvd::cli::kCacheReport, {"-n", "33"}).tokens.value_or(0), 33u);
  EXPECT_EQ(parse(kvd::cli::kRoofline, {"-t", "1"}).threads, 1);
}

TEST(CliTable, RepeatLastNDefaultsToTheSamplersWindow) {
  EXPECT_EQ(kvd::SamplerConfig{}.repetition_last_n, 64);
  EXPECT_EQ(parse(kvd::cli::kGenerate, {}).sampler.repetition_last_n, 64);
  EXPECT_EQ(parse(kvd::cli::kGenerate, {"--repeat-last-n", "0"}).sampler.repetition_last_n, 0);
  EXPECT_NE(error_of(kvd::cli::kGenerate, {"--repeat-last-n", "-1"}).find("--repeat-last-n"), std::string::npos);
}

TEST(CliTable, PlanAndRooflineValues) {
  const Params p = parse(kvd::cli::kPlan, {"--layers", "80", "--kv-heads=8", "--head-dim", "128", "--dtype", "fp16",
                                           "--memory-gb", "80", "--bandwidth-gb-s", "3350", "--gpu", "h100",
                                           "--weights-gb", "0", "--weight-dtype", "bf16", "--list-gpus"});
  EXPECT_EQ(p.layers.value_or(0), 80);
  EXPECT_EQ(p.kv_heads.value_or(0), 8);
  EXPECT_EQ(p.head_dim.value_or(0), 128);
  EXPECT_EQ(p.dtype, kvd::DType::kF16);
  EXPECT_EQ(p.memory_gb.value_or(0), 80.0);
  EXPECT_EQ(p.bandwidth_gb_s.value_or(0), 3350.0);
  EXPECT_EQ(p.gpu.value_or(""), "h100");
  EXPECT_EQ(p.weights_gb.value_or(-1), 0.0);
  EXPECT_EQ(p.weight_dtype.value_or(""), "bf16");
  EXPECT_TRUE(p.list_gpus);

  const Params r = parse(kvd::cli::kRoofline, {"--out-dir", "d", "--quick", "--max-others", "25", "--patience=3"});
  EXPECT_EQ(r.out_dir, "d");
  EXPECT_TRUE(r.quick);
  EXPECT_EQ(r.max_others, 0.25);
  EXPECT_EQ(r.patience, 3.0);
}

TEST(CliTable, UnknownOptionIsNamed) {
  EXPECT_EQ(error_of(kvd::cli::kGenerate, {"--no-such-option"}), "unknown option '--no-such-option'");
  EXPECT_EQ(error_of(kvd::cli::kPlan, {"-x"}), "unknown option '-x'");
}

TEST(CliTable, OptionOfAnotherProgramIsUnknown) {
  EXPECT_EQ(error_of(kvd::cli::kPlan, {"--temperature", "1"}), "unknown option '--temperature'");
  EXPECT_EQ(error_of(kvd::cli::kGenerate, {"--gpu", "l4"}), "unknown option '--gpu'");
  EXPECT_EQ(error_of(kvd::cli::kRoofline, {"--json"}), "unknown option '--json'");
}

TEST(CliTable, PositionalArgumentIsRejected) {
  EXPECT_NE(error_of(kvd::cli::kGenerate, {"model.bin"}).find("unexpected argument 'model.bin'"), std::string::npos);
}

TEST(CliTable, MissingValueNamesTheOptionAsSpelled) {
  EXPECT_EQ(error_of(kvd::cli::kGenerate, {"-n"}), "-n needs a value (N)");
  EXPECT_EQ(error_of(kvd::cli::kGenerate, {"--model"}), "--model needs a value (PATH)");
}

TEST(CliTable, FlagGivenAValueIsNamed) {
  EXPECT_EQ(error_of(kvd::cli::kGenerate, {"--json=yes"}), "--json takes no value");
  EXPECT_EQ(error_of(kvd::cli::kCacheReport, {"--no-model=1"}), "--no-model takes no value");
}

TEST(CliTable, BadValuesNameTheOptionAndTheLimit) {
  EXPECT_EQ(error_of(kvd::cli::kGenerate, {"--steps", "abc"}), "--steps: 'abc' is not an integer");
  EXPECT_EQ(error_of(kvd::cli::kGenerate, {"-n", "0"}), "-n: 0 must be in [1, 1073741824]");
  EXPECT_EQ(error_of(kvd::cli::kGenerate, {"--temp", "warm"}), "--temp: 'warm' is not a number");
  EXPECT_EQ(error_of(kvd::cli::kGenerate, {"--threads=0"}), "--threads: 0 must be in [1, 1024]");
  EXPECT_NE(error_of(kvd::cli::kGenerate, {"--cache-dtype", "q4"}).find("--cache-dtype must be f32, bf16 or f16"),
            std::string::npos);
  EXPECT_NE(error_of(kvd::cli::kGenerate, {"--prompt-ids", "1,x"}).find("--prompt-ids: 'x'"), std::string::npos);
  EXPECT_NE(error_of(kvd::cli::kPlan, {"--dtype", "f8"}).find("--dtype: unknown dtype 'f8'"), std::string::npos);
  EXPECT_EQ(error_of(kvd::cli::kPlan, {"-c", "-5"}), "-c: '-5' is not a positive integer");
  EXPECT_NE(error_of(kvd::cli::kPlan, {"--memory-gb", "0"}).find("--memory-gb: 0 must be in (0"), std::string::npos);
  EXPECT_NE(error_of(kvd::cli::kRoofline, {"--max-others", "101"}).find("--max-others: 101 must be in [0, 100]"),
            std::string::npos);
}

TEST(CliTable, NamesAreUniqueWithinEachProgram) {
  for (Program program : kPrograms) {
    Params p;
    const OptionTable t(program, p, "");
    std::vector<std::string> seen;
    for (const kvd::cli::Option& o : t.options())
      for (const std::string& n : o.names) {
        for (const std::string& s : seen) EXPECT_NE(s, n) << "program " << program << " declares " << n << " twice";
        seen.push_back(n);
      }
  }
}

TEST(CliTable, EveryOptionBelongsToAProgramAndHasHelp) {
  Params p;
  for (const kvd::cli::Option& o : kvd::cli::all_options(p)) {
    EXPECT_NE(o.programs, 0u) << o.name();
    EXPECT_EQ(o.name().rfind("--", 0), 0u) << o.name() << ": the long name comes first";
    EXPECT_FALSE(o.help.empty()) << o.name();
    EXPECT_FALSE(o.section.empty()) << o.name();
    EXPECT_TRUE(o.handler) << o.name();
  }
}

TEST(CliTable, HelpListsEveryNameOfEveryOption) {
  for (Program program : kPrograms) {
    Params p;
    const OptionTable t(program, p, "usage: prog", "the end");
    const std::string help = t.help();
    EXPECT_EQ(help.rfind("usage: prog\n", 0), 0u);
    EXPECT_NE(help.find("the end\n"), std::string::npos);
    EXPECT_GT(t.options().size(), 1u);
    for (const kvd::cli::Option& o : t.options())
      for (const std::string& n : o.names) {
        // as a whole word: followed by a space, a comma or the end of the line
        const bool listed = help.find(n + " ") != std::string::npos || help.find(n + ",") != std::string::npos ||
                            help.find(n + "\n") != std::string::npos;
        EXPECT_TRUE(listed) << "program " << program << ": --help lacks " << n << "\n" << help;
      }
  }
}

TEST(CliTable, HelpIsWrappedAndShowsCurrentDefaults) {
  Params p;
  p.seed = 1;
  const OptionTable t(kvd::cli::kCacheReport, p, "");
  const std::string help = t.help();
  std::size_t start = 0;
  while (start < help.size()) {
    const std::size_t end = help.find('\n', start);
    EXPECT_LE(end - start, OptionTable::kWidth) << help.substr(start, end - start);
    start = end + 1;
  }
  EXPECT_NE(help.find("(default 1)"), std::string::npos) << help;
  EXPECT_NE(help.find("Models:\n"), std::string::npos);
}

TEST(CliTable, SetHelpReplacesTextAndRejectsUnknownNames) {
  Params p;
  OptionTable t(kvd::cli::kPlan, p, "");
  t.set_help("-m", "a checkpoint to plan for", "Cache shape");
  EXPECT_EQ(t.find("--model")->help, "a checkpoint to plan for");
  EXPECT_EQ(t.find("--model")->section, "Cache shape");
  EXPECT_THROW(t.set_help("--temperature", "x"), kvd::ArgumentError);
}

TEST(CliTable, WrapKeepsWordsAndWidth) {
  const auto lines = kvd::cli::wrap("aaa bbb ccc dddddddddd e", 7);
  EXPECT_EQ(lines, (std::vector<std::string>{"aaa bbb", "ccc", "dddddddddd", "e"}));
  EXPECT_TRUE(kvd::cli::wrap("", 10).empty());
}

}  // namespace
