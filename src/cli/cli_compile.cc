// `opfuse compile FILE`: runs the fusion pipeline and JIT-compiles every fused group to CUBIN
// (NVRTC; no GPU needed), through the kernel cache. --stats --json prints the cache counters as
// one JSON object, which is how tests check "a second process compiles nothing".
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "jit/cubin_info.h"
#include "jit/jit_compiler.h"
#include "jit/nvrtc_compiler.h"
#include "passes/pipeline.h"
#include "util/files.h"

namespace opfuse::cli {
namespace {

struct CompileArgs {
  std::string file;
  std::string arch;
  std::string emit_dir;
  bool stats = false, json = false, unaligned = false, no_cache = false;
  int threads = 0;
  std::vector<std::string> shapes;
};

int RunCompile(const CompileArgs& a) {
  auto g = ParseGraphFile(a.file);
  if (!g.ok()) return Fail("compile", g.status());
  auto bindings = ParseShapeBindings(a.shapes);
  if (!bindings.ok()) return Fail("compile", bindings.status());
  auto config = FusionConfig::FromEnv();
  if (!config.ok()) return Fail("compile", config.status());
  // The target first: a bad --arch (or OPFUSE_ARCH) is refused by name, not reported group by group.
  const std::string arch = a.arch.empty() ? jit::DefaultArch() : a.arch;
  const char* arch_source = !a.arch.empty() ? "--arch" : std::getenv("OPFUSE_ARCH") ? "OPFUSE_ARCH" : "the default arch";
  if (Status s = jit::ValidateArch(arch, arch_source); !s.ok()) return Fail("compile", s);
  if (!jit::NvrtcAvailable()) return Fail("compile", Unavailable("NVRTC is not built into this opfuse"));
  PassContext ctx;
  ctx.config = *config;
  ctx.bindings = *bindings;
  if (auto st = RunPipeline(*g, ctx); !st.ok()) return Fail("compile", st);
  if (!a.emit_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.emit_dir, ec);
    if (ec) return Fail("compile", InvalidArgument(fmt::format("--emit-source {}: {}", a.emit_dir, ec.message())));
  }
  jit::CacheOptions copts;
  copts.enable_disk = !a.no_cache && ctx.config.enable_cache;
  jit::KernelCache cache(copts);
  jit::JitCompiler compiler(cache, {arch, !a.unaligned, a.threads});
  auto t0 = std::chrono::steady_clock::now();
  auto results = compiler.CompileGraph(*g);
  double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  nlohmann::json kernels = nlohmann::json::array();
  int failures = 0;
  for (const auto& r : results) {
    const FusionGroup& grp = g->groups[r.group];
    if (!r.status.ok()) {
      // Not a silent fallback: the reason is printed, and the group runs unfused.
      std::cerr << fmt::format("opfuse compile: group {} [{}] not compiled, runs unfused: {}\n", r.group, grp.kind,
                               r.status.message());
      if (r.status.code() != StatusCode::kUnimplemented) ++failures;
      continue;
    }
    const auto& k = *r.kernel;
    std::string src_file;
    if (!a.emit_dir.empty()) {
      src_file = (std::filesystem::path(a.emit_dir) / (k.emitted.function + ".cu")).string();
      if (auto st = WriteFileAtomic(src_file, k.emitted.source); !st.ok()) return Fail("compile", st);
    }
    // Registers per thread of each function (read from the cubin, as ptxas -v reports them) and the
    // threads that fit on an SM of compute capability 9.0 at the main function's block size.
    nlohmann::json regs = nlohmann::json::object();
    int main_regs = -1;
    if (auto rc = jit::CubinRegisterCounts(k.binary->binary); rc.ok()) {
      for (const auto& [fn, n] : *rc) regs[fn] = n;
      if (rc->count(k.emitted.function)) main_regs = rc->at(k.emitted.function);
    } else {
      std::cerr << fmt::format("opfuse compile: {}: registers not read from the cubin: {}\n", k.emitted.function,
                               rc.status().message());
    }
    kernels.push_back({{"group", r.group}, {"kind", grp.kind}, {"kernel", k.emitted.function},
                       {"vec", k.emitted.vec}, {"threads", k.emitted.threads},
                       {"row_in_registers", k.emitted.row_in_registers}, {"cubin_bytes", k.binary->binary.size()},
                       {"registers", regs}, {"source", src_file}});
    if (main_regs >= 0) kernels.back()["resident_threads_sm90"] = jit::ResidentThreadsSm90(main_regs, k.emitted.threads);
  }
  auto st = cache.Stats();
  nlohmann::json stats = {{"kernels", kernels.size()}, {"compiles", st.compiles}, {"memory_hits", st.memory_hits},
                          {"disk_hits", st.disk_hits}, {"compile_ms", st.compile_ms}};
  if (a.json) {
    if (a.stats) std::cout << stats.dump() << "\n";
    else std::cout << nlohmann::json{{"graph", g->name}, {"arch", compiler.arch()}, {"kernels", kernels},
                                     {"stats", stats}, {"wall_ms", wall_ms}}.dump(2) << "\n";
  } else {
    std::cout << fmt::format("{}: {} fused group(s) -> {} kernel(s) for {} ({})\n", a.file, results.size(),
                             kernels.size(), compiler.arch(), jit::NvrtcVersion());
    for (const auto& k : kernels) {
      const std::string fn = k["kernel"].get<std::string>();
      const std::string regs = k["registers"].contains(fn) ? fmt::format("{:>3}", k["registers"][fn].get<int>()) : "  ?";
      std::cout << fmt::format("  group {:>3} {:<22} {:<44} vec {:>2} threads {:>3} regs {} {:>7} B{}\n", k["group"].get<int>(),
                               k["kind"].get<std::string>(), fn, k["vec"].get<int>(), k["threads"].get<int>(), regs,
                               k["cubin_bytes"].get<size_t>(), k["row_in_registers"].get<bool>() ? "  row in registers" : "");
    }
    if (a.stats)
      std::cout << fmt::format("cache {}: {} compiles ({:.1f} ms NVRTC), {} memory hits, {} disk hits; wall {:.1f} ms\n",
                               cache.dir().empty() ? "(memory only)" : cache.dir(), st.compiles, st.compile_ms,
                               st.memory_hits, st.disk_hits, wall_ms);
  }
  if (failures && !ctx.config.fallback_on_error) return Fail("compile", Internal(fmt::format("{} group(s) failed to compile", failures)));
  SetExitCode(0);
  return 0;
}

}  // namespace

void RegisterCompile(CLI::App& app) {
  auto a = std::make_shared<CompileArgs>();
  auto* cmd = app.add_subcommand("compile", "Fuse a graph and JIT-compile every fused group to CUBIN (NVRTC; no GPU needed)");
  cmd->add_option("file", a->file, "graph file (.ofg)")->required();
  cmd->add_option("--arch", a->arch, "target architecture, e.g. sm_90 or sm_90a (default: OPFUSE_ARCH or sm_90)");
  cmd->add_option("--emit-source", a->emit_dir, "write each generated kernel's CUDA source to DIR/<kernel>.cu");
  cmd->add_flag("--stats", a->stats, "print kernel cache counters (compiles, memory/disk hits, NVRTC ms)");
  cmd->add_flag("--json", a->json, "JSON output; with --stats only the counters object");
  cmd->add_option("--shape", a->shapes, "bind a symbolic dim, e.g. --shape T=128 (affects size-based fusion decisions)");
  cmd->add_option("--threads", a->threads, "parallel NVRTC compiles (default: all cores)");
  cmd->add_flag("--unaligned", a->unaligned, "generate the variant that makes no 16-byte alignment assumption");
  cmd->add_flag("--no-cache", a->no_cache, "do not read or write the disk cache (OPFUSE_CACHE_DIR)");
  cmd->callback([a] { RunCompile(*a); });
}

}  // namespace opfuse::cli
