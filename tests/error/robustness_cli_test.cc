// Robustness suite (issue 28): malformed input to every command gives exit code 2 and one line on
// stderr, promptly, in bounded memory, leaving no file behind — never a crash, an unbounded read, a
// minutes-long run before the error, or a silent success. Table-driven: each row sets up files in a
// fresh folder, runs `opfuse ARGS` (OPFUSE_CLI_PATH) with a wall-clock limit, and checks
//   * exit code 2 and exactly one line on stderr containing the row's substring,
//   * the run ended within kSeconds, its peak RSS (wait4) stayed under kMaxRssMiB,
//   * the folder holds exactly the files the row created (no OUT.tmp*, no partial output).
// Without a sanitizer the child also gets an address-space limit, so a regression to an unbounded
// read fails here instead of exhausting the machine.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#if defined(__SANITIZE_ADDRESS__)
#define OPFUSE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OPFUSE_TEST_ASAN 1
#endif
#endif

namespace opfuse {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr double kSeconds = 60;      // every bad input is refused well within this
constexpr long kMaxRssMiB = 2048;    // ... and without touching more memory than this

struct Outcome {
  int code = -1;
  bool timed_out = false;
  long max_rss_mib = 0;
  double seconds = 0;
  std::string err;
};

// `opfuse args` via /bin/sh (args is shell text), in `dir`, stdout to /dev/null, stderr captured.
Outcome RunBounded(const fs::path& dir, const std::string& args, const std::string& env = "") {
  const fs::path err = dir.parent_path() / (dir.filename().string() + ".stderr");
  const std::string cmd = "cd '" + dir.string() + "' && exec " + (env.empty() ? "" : "env " + env + " ") + "'" +
                          OPFUSE_CLI_PATH + "' " + args + " >/dev/null 2>'" + err.string() + "' </dev/null";
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
#ifndef OPFUSE_TEST_ASAN
    rlimit as{size_t{16} << 30, size_t{16} << 30};  // 16 GiB of address space (CUDA builds reserve some)
    setrlimit(RLIMIT_AS, &as);
#endif
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  Outcome o;
  int status = 0;
  rusage ru{};
  while (true) {
    const pid_t r = wait4(pid, &status, WNOHANG, &ru);
    if (r == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > kSeconds) {
      o.timed_out = true;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      wait4(pid, &status, 0, &ru);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  o.max_rss_mib = ru.ru_maxrss / 1024;
  std::ifstream f(err);
  std::stringstream ss;
  ss << f.rdbuf();
  o.err = ss.str();
  fs::remove(err);
  return o;
}

std::set<std::string> Listing(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) out.insert(fs::relative(e.path(), dir).string());
  return out;
}

void WriteText(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

const fs::path kFamilies = fs::path(OPFUSE_SOURCE_DIR) / "tests" / "data" / "families";

// A copy of the tiny llama fixture under dir/NAME with config.json keys changed (null removes).
void ModelWith(const fs::path& dir, const std::string& name, const json& changes) {
  const fs::path m = dir / name;
  fs::create_directories(m);
  fs::copy_file(kFamilies / "llama" / "model.safetensors", m / "model.safetensors");
  std::ifstream in(kFamilies / "llama" / "config.json");
  json c = json::parse(in);
  for (const auto& [k, v] : changes.items()) {
    if (v.is_null()) c.erase(k);
    else c[k] = v;
  }
  WriteText(m / "config.json", c.dump(1));
}

// A safetensors file whose header names tensor `a` twice.
std::string DuplicateSafetensors() {
  const std::string header =
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  return out + header + std::string(8, '\0');
}

const char* kGraphOk = "graph g\ninput x: f32[T, 8]\nparam w: f32[8]\ny = rms_norm(x, w)\noutput y\n";

struct Row {
  const char* name;
  std::function<void(const fs::path&)> setup;  // files in the folder
  std::string args;                            // shell text, run in the folder
  const char* problem;                         // substring of the one stderr line
  std::string env = "";
};

void PrintTo(const Row& r, std::ostream* os) { *os << r.name; }

std::vector<Row> Rows() {
  return {
      // ---- files: bounded reads, directories, sizes
      {"explain_dev_zero", [](const fs::path&) {}, "explain /dev/zero", "larger than the 256 MiB"},
      {"explain_directory", [](const fs::path& d) { fs::create_directories(d / "g.ofg"); }, "explain g.ofg",
       "g.ofg: is a directory"},
      {"run_directory", [](const fs::path& d) { fs::create_directories(d / "g.ofg"); }, "run g.ofg", "is a directory"},
      {"generate_config_is_directory",
       [](const fs::path& d) {
         ModelWith(d, "m", json::object());
         fs::remove(d / "m" / "config.json");
         fs::create_directories(d / "m" / "config.json");
       },
       "generate --model m --ids 1,2", "config.json: is a directory"},
      // ---- sizes in config.json and flags
      {"max_position_2e62", [](const fs::path& d) { ModelWith(d, "m", {{"max_position_embeddings", 4611686018427387904LL}}); },
       "generate --model m --ids 1,2", "max_position_embeddings"},
      {"max_position_1e8", [](const fs::path& d) { ModelWith(d, "m", {{"max_position_embeddings", 100000000}}); },
       "generate --model m --ids 1,2", "max_position_embeddings"},
      {"max_position_float", [](const fs::path& d) { ModelWith(d, "m", {{"max_position_embeddings", 1e12}}); },
       "generate --model m --ids 1,2", "max_position_embeddings"},
      {"memory_estimate", [](const fs::path& d) { ModelWith(d, "m", {{"max_position_embeddings", 16000000}}); },
       "generate --model m --ids 1,2 --max-context 16000000 --batch 4096", "not enough memory"},
      {"generate_batch_huge", [](const fs::path&) {}, "generate --batch 1000000", "exceeds the engine's maximum of 4096"},
      {"generate_batch_int64", [](const fs::path&) {}, "generate --batch 999999999999", "exceeds the engine's maximum"},
      {"generate_new_tokens_int64", [](const fs::path&) {}, "generate --ids 1,2 --max-new-tokens 9223372036854775807",
       "exceeds the context"},
      {"generate_seed_negative", [](const fs::path&) {}, "generate --seed -1", "--seed: must be a non-negative integer"},
      {"generate_weight_seed_negative", [](const fs::path&) {}, "generate --weight-seed -5", "must be a non-negative integer"},
      {"run_seed_negative", [](const fs::path& d) { WriteText(d / "g.ofg", kGraphOk); }, "run g.ofg --shape T=2 --seed -1",
       "must be a non-negative integer"},
      {"bench_e2e_case_beyond_int64", [](const fs::path&) {},
       "bench e2e --backend cpu --cases '[prefill=99999999999999999999, decode=1]'", "is out of range"},
      {"bench_e2e_case_batch_huge", [](const fs::path&) {},
       "bench e2e --backend cpu --cases '[prefill=8, decode=1, batch=10000000]'", "exceeds the engine's maximum"},
      {"bench_e2e_case_past_context", [](const fs::path&) {},
       "bench e2e --backend cpu --cases '[prefill=8, decode=1]' --cases '[prefill=250, decode=30]'",
       "exceeds the context of 256"},
      // ---- output paths, checked before any work; nothing left behind
      {"generate_dump_logits_directory", [](const fs::path& d) { fs::create_directories(d / "out"); },
       "generate --ids 1,2 --dump-logits out", "--dump-logits out: is a directory"},
      {"generate_dump_logits_no_folder", [](const fs::path&) {}, "generate --ids 1,2 --dump-logits nope/x.json",
       "does not exist"},
      {"bench_e2e_output_directory", [](const fs::path& d) { fs::create_directories(d / "out"); },
       "bench e2e --backend cpu --output out", "--output out: is a directory"},
      {"eval_run_output_directory", [](const fs::path& d) { fs::create_directories(d / "out"); },
       "eval run --backend cpu --output out", "--output out: is a directory"},
      {"eval_run_markdown_directory", [](const fs::path& d) { fs::create_directories(d / "md"); },
       "eval run --backend cpu --output r.json --markdown md", "--markdown md: is a directory"},
      // ---- compile targets
      {"compile_bad_arch", [](const fs::path& d) { WriteText(d / "g.ofg", kGraphOk); }, "compile g.ofg --arch sm_bogus",
       "--arch 'sm_bogus': not a GPU architecture"},
      {"compile_bad_arch_env", [](const fs::path& d) { WriteText(d / "g.ofg", kGraphOk); }, "compile g.ofg",
       "OPFUSE_ARCH 'junk': not a GPU architecture", "OPFUSE_ARCH=junk"},
      // ---- attribute values and names
      {"rms_norm_eps_negative",
       [](const fs::path& d) {
         WriteText(d / "g.ofg", "graph g\ninput x: f32[4, 8]\nparam w: f32[8]\ny = rms_norm(x, w) {eps=-1}\noutput y\n");
       },
       "run g.ofg", "attribute eps must be a finite number > 0, got -1"},
      {"softmax_scale_nan",
       [](const fs::path& d) { WriteText(d / "g.ofg", "graph g\ninput x: f32[4, 8]\ny = softmax(x) {scale=nan}\noutput y\n"); },
       "run g.ofg", "attribute scale must be a finite number, got nan"},
      {"attribute_misspelled",
       [](const fs::path& d) {
         WriteText(d / "g.ofg", "graph g\ninput x: f32[4, 8]\nparam w: f32[8]\ny = rms_norm(x, w) {epsilon=1e-3}\noutput y\n");
       },
       "explain g.ofg", "unknown attribute 'epsilon' (it takes: eps)"},
      // ---- the other commands
      {"bench_ops_seed_negative", [](const fs::path&) {}, "bench ops --seed -1", "--seed: must be a non-negative integer"},
      {"profile_out_directory", [](const fs::path& d) { fs::create_directories(d / "out"); }, "profile --out out",
       "--out out: is a directory"},
      {"init_weights_seed_negative", [](const fs::path&) {}, "init-weights --config tiny --out o --seed -1",
       "--seed: must be a non-negative integer"},
      {"tokenize_no_model", [](const fs::path&) {}, "tokenize --model nope hello", "nope: no such directory"},
      {"tokenize_json_is_directory",
       [](const fs::path& d) {
         ModelWith(d, "m", json::object());
         fs::create_directories(d / "m" / "tokenizer.json");
       },
       "tokenize --model m hello", "m/tokenizer.json: is a directory"},
      // ---- checkpoints
      {"safetensors_duplicate_name",
       [](const fs::path& d) {
         ModelWith(d, "m", json::object());
         WriteText(d / "m" / "model.safetensors", DuplicateSafetensors());
       },
       "generate --model m --ids 1,2", "header names 'a' twice"},
      {"model_type_number", [](const fs::path& d) { ModelWith(d, "m", {{"model_type", 7}}); }, "generate --model m --ids 1,2",
       "'model_type' must be a string"},
      {"config_error_prefix_once", [](const fs::path& d) { ModelWith(d, "m", {{"hidden_size", "abc"}}); },
       "generate --model m --ids 1,2", "m/config.json: 'hidden_size'"},
  };
}

class Robustness : public ::testing::TestWithParam<Row> {};

TEST_P(Robustness, ExitTwoOneLinePromptNothingLeft) {
  const Row& row = GetParam();
  static std::atomic<int> n{0};
  const fs::path dir = fs::temp_directory_path() /
                       ("opfuse_robust_" + std::to_string(::getpid()) + "_" + std::to_string(n++)) / row.name;
  fs::create_directories(dir);
  row.setup(dir);
  const std::set<std::string> before = Listing(dir);
  const Outcome o = RunBounded(dir, row.args, row.env);
  const std::set<std::string> after = Listing(dir);
  std::error_code ec;
  fs::remove_all(dir.parent_path(), ec);
  EXPECT_FALSE(o.timed_out) << "still running after " << kSeconds << " s";
  EXPECT_EQ(o.code, 2) << "stderr: " << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << "stderr is not one line:\n" << o.err;
  EXPECT_NE(o.err.find(row.problem), std::string::npos) << "stderr: " << o.err << "wanted: " << row.problem;
  EXPECT_EQ(o.err.find("config.json: config.json"), std::string::npos) << o.err;
  EXPECT_LT(o.max_rss_mib, kMaxRssMiB) << "peak RSS " << o.max_rss_mib << " MiB";
  EXPECT_EQ(after, before) << "files were created or removed";
}

INSTANTIATE_TEST_SUITE_P(Commands, Robustness, ::testing::ValuesIn(Rows()),
                         [](const ::testing::TestParamInfo<Row>& i) { return std::string(i.param.name); });

// Without a GPU (or without the CUDA backend), generate and bench e2e on cuda are refused before any
// weight is built: within seconds and a little memory (they used to build 2.3 GB of weights first).
TEST(RobustnessCuda, NoDeviceIsRefusedBeforeLoading) {
  const fs::path dir = fs::temp_directory_path() / ("opfuse_robust_cuda_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Outcome probe = RunBounded(dir, "generate --backend cuda --max-new-tokens 1");
  if (probe.code == 0) {
    fs::remove_all(dir);
    GTEST_SKIP() << "a CUDA device is present: the no-device refusal cannot be exercised here";
  }
  for (const char* args : {"generate --backend cuda --max-new-tokens 1", "bench e2e --backend cuda --runs 1"}) {
    const Outcome o = RunBounded(dir, args);
    EXPECT_EQ(o.code, 2) << args << ": " << o.err;
    EXPECT_NE(o.err.find("no CUDA device"), std::string::npos) << args << ": " << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_LT(o.seconds, 20) << args;
    EXPECT_LT(o.max_rss_mib, 512) << args << ": peak RSS " << o.max_rss_mib << " MiB";
  }
  EXPECT_TRUE(Listing(dir).empty());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace opfuse
