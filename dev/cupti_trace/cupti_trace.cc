// libopfuse_cupti_trace.so: a minimal CUPTI injection tracer, the stand-in for `nsys` where the GPU
// machine has none. It records every kernel the process runs, the kernel nodes of replayed CUDA
// graphs included, with GPU start/end timestamps, and writes one CSV at exit.
//
// Build:  dev/cupti_trace/build.sh [OUT_DIR]       (default build/cupti_trace/; copies libcupti.so.13
//         next to the tracer, found through rpath $ORIGIN, so OUT_DIR can be carried to another machine)
// Use:    export CUDA_INJECTION64_PATH=$PWD/build/cupti_trace/libopfuse_cupti_trace.so
//         OPFUSE_CUPTI_TRACE_OUT=trace.csv <any CUDA program>      (default output: cupti_trace.csv)
//         python3 tools/kernel_trace_summary.py trace.csv --per-step K
// The CUDA driver loads the library during cuInit and calls InitializeInjection(), which enables
// CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL with asynchronous 8 MiB buffers. Completed buffers are parsed
// into compact rows; an atexit handler force-flushes CUPTI and writes
//   start_ns,end_ns,duration_ns,device,graph_node_id,grid_x,grid_y,grid_z,block_x,registers,name
// sorted by start, names demangled and CSV-quoted. Messages go to stderr, prefixed `cupti_trace:`.
//
// Limitations: kernels only (no memcpy/memset/API rows); no stream column (a device's streams are
// merged by start time; `device` tells the GPUs of a multi-GPU run apart — their timestamps share
// one clock); the trace is written only on a normal exit (not on _exit,
// abort or a signal), and kernels still running at exit are dropped (counted as incomplete): the
// program should synchronize before it exits; all rows stay in host memory until then (~48 B each);
// the driver must support this CUPTI (CUDA 13); kernel tracing serializes nothing but adds a little
// launch overhead, so compare traced runs with traced runs.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr size_t kBufferBytes = 8u << 20;
constexpr size_t kBufferAlign = 8;

using KernelRecord = CUpti_ActivityKernel10;  // the CONCURRENT_KERNEL record of CUDA 13's CUPTI

struct Row {
  uint64_t start, end, graph_node_id;
  uint32_t device;
  int32_t grid_x, grid_y, grid_z, block_x;
  uint32_t registers, name;  // name: index into g_names
};

std::mutex g_mu;  // guards everything below; buffers complete on a CUPTI worker thread
std::vector<Row> g_rows;
std::vector<std::string> g_names;  // mangled, interned
std::unordered_map<std::string, uint32_t> g_name_ids;
size_t g_dropped = 0, g_incomplete = 0;

bool Ok(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* msg = nullptr;
  if (cuptiGetResultString(r, &msg) != CUPTI_SUCCESS || !msg) msg = "unknown error";
  std::fprintf(stderr, "cupti_trace: %s failed: %s (%d)\n", what, msg, static_cast<int>(r));
  return false;
}
#define CUPTI_OK(call) Ok((call), #call)

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;  // 0: CUPTI drops records (and counts them)
  *max_records = 0;
  if (!*buffer) std::fprintf(stderr, "cupti_trace: out of memory for an activity buffer\n");
}

void CUPTIAPI BufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mu);
  CUpti_Activity* rec = nullptr;
  for (;;) {
    CUptiResult r = cuptiActivityGetNextRecord(buffer, valid, &rec);
    if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // end of the buffer
    if (!Ok(r, "cuptiActivityGetNextRecord")) break;
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const KernelRecord*>(rec);
    if (k->start == 0 || k->end < k->start) {  // not finished when force-flushed
      ++g_incomplete;
      continue;
    }
    auto [it, fresh] = g_name_ids.try_emplace(k->name ? k->name : "<unnamed kernel>",
                                              static_cast<uint32_t>(g_names.size()));
    if (fresh) g_names.push_back(it->first);
    g_rows.push_back({k->start, k->end, k->graphNodeId, k->deviceId, k->gridX, k->gridY, k->gridZ, k->blockX,
                      k->registersPerThread, it->second});
  }
  size_t dropped = 0;
  if (CUPTI_OK(cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped))) g_dropped += dropped;
  std::free(buffer);
}

std::string Demangle(const std::string& mangled) {
  int status = 0;
  char* s = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && s ? s : mangled;  // extern "C" kernels are not mangled
  std::free(s);
  return out;
}

std::string CsvQuote(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

void WriteTrace() {
  CUPTI_OK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  std::lock_guard<std::mutex> lock(g_mu);
  size_t dropped = 0;  // the global queue, beyond what the buffer callbacks counted
  if (CUPTI_OK(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped))) g_dropped += dropped;
  if (g_dropped) std::fprintf(stderr, "cupti_trace: %zu activity records dropped\n", g_dropped);
  if (g_incomplete)
    std::fprintf(stderr, "cupti_trace: %zu kernels still running at exit, left out\n", g_incomplete);

  const char* env = std::getenv("OPFUSE_CUPTI_TRACE_OUT");
  const char* path = env && *env ? env : "cupti_trace.csv";
  FILE* f = std::fopen(path, "w");
  if (!f) {
    std::perror("cupti_trace: cannot open the output file");
    return;
  }
  std::vector<std::string> names;
  names.reserve(g_names.size());
  for (const auto& m : g_names) names.push_back(CsvQuote(Demangle(m)));
  std::stable_sort(g_rows.begin(), g_rows.end(), [](const Row& a, const Row& b) { return a.start < b.start; });
  std::fprintf(f, "start_ns,end_ns,duration_ns,device,graph_node_id,grid_x,grid_y,grid_z,block_x,registers,name\n");
  for (const Row& r : g_rows)
    std::fprintf(f, "%llu,%llu,%llu,%u,%llu,%d,%d,%d,%d,%u,%s\n", (unsigned long long)r.start,
                 (unsigned long long)r.end, (unsigned long long)(r.end - r.start), r.device,
                 (unsigned long long)r.graph_node_id, r.grid_x, r.grid_y, r.grid_z, r.block_x,
                 r.registers, names[r.name].c_str());
  if (std::fclose(f) != 0) {
    std::perror("cupti_trace: writing the output file failed");
    return;
  }
  std::fprintf(stderr, "cupti_trace: %zu kernels -> %s\n", g_rows.size(), path);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static bool done = false;  // the driver calls it once per process; guard anyway
  if (done) return 1;
  done = true;
  if (!CUPTI_OK(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted)) ||
      !CUPTI_OK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)))
    return 0;
  if (std::atexit(WriteTrace) != 0) {
    std::fprintf(stderr, "cupti_trace: atexit failed, no trace will be written\n");
    return 0;
  }
  return 1;
}
