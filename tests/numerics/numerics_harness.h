// Shared machinery of the numerics tests (DESIGN.md "Measuring"):
//   - a seed that changes every run (std::random_device; OPFUSE_TEST_SEED=<n> replays one), mixed
//     with the test's name, and printed with every failure through SeedTrace;
//   - RunOp: one op executed by its CPU reference (OpDef::cpu) on given inputs, with output types
//     from the op's own inference, outputs poisoned (NaN / sentinel) before the call and the inputs
//     checked unmodified after it;
//   - ExpectClose / ExpectExact: every element written (no poison left), NaN positions agree, no
//     all-zero reference, and relative error ||out - ref|| / ||ref|| within a per-dtype bound;
//   - the coverage registry: NUMERICS_TEST(Suite, Name, OpKind::kX, ...) defines a gtest TEST and
//     records which ops it covers; op_coverage_test.cc fails for any op in ops.def with no case.
// The double-precision references live in the tests themselves and never call src/ops code.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "opfuse/graph.h"
#include "ir/host_tensor.h"

namespace opfuse::test {

// ------------------------------------------------------------------ seeds
uint64_t ProcessSeed();  // random per process unless OPFUSE_TEST_SEED is set
// A generator for the current test: ProcessSeed() mixed with the test's full name.
std::mt19937_64 TestRng();
// SCOPED_TRACE text naming the seed and how to replay it.
std::string SeedNote();
#define OPFUSE_SEED_TRACE() SCOPED_TRACE(::opfuse::test::SeedNote())

// ------------------------------------------------------------------ coverage registry
// Ops covered by each registered test, "Suite.Name" -> ops; read by op_coverage_test.cc.
std::map<std::string, std::vector<OpKind>>& CoverageRegistry();
bool RegisterCoverage(const char* test, std::initializer_list<OpKind> ops);

#define NUMERICS_TEST(Suite, Name, ...)                                                                  \
  static const bool OPFUSE_CONCAT(kCoverage_##Suite##_##Name, __LINE__) =                               \
      ::opfuse::test::RegisterCoverage(#Suite "." #Name, {__VA_ARGS__});                                \
  TEST(Suite, Name)

// ------------------------------------------------------------------ tensors
const std::vector<DType>& FloatDTypes();  // f32, bf16, f16
// Uniform floats in [lo, hi] stored in `dt` (so rounded to it). For int dtypes: integers in [lo, hi].
HostTensor Rand(DType dt, std::vector<int64_t> shape, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0);
// Magnitudes in [lo, hi] with a random sign (divisors, reciprocals).
HostTensor RandSigned(DType dt, std::vector<int64_t> shape, std::mt19937_64& rng, double lo, double hi);
HostTensor RandBool(std::vector<int64_t> shape, std::mt19937_64& rng);
std::vector<double> Values(const HostTensor& t);  // every element as double
int64_t Numel(const std::vector<int64_t>& shape);
std::string ShapeStr(const std::vector<int64_t>& shape);
// The value `x` rounded to `dt` (as a store of that dtype would).
double RoundTo(DType dt, double x);

// ------------------------------------------------------------------ running one op
// Builds a one-node graph (inputs named in0, in1, ...), infers output types, allocates the outputs,
// poisons them, runs OpDef::cpu, and checks the inputs were not modified. Fails the test (and
// returns an empty vector) on any error.
std::vector<HostTensor> RunOp(OpKind op, const std::vector<HostTensor>& inputs, const Attrs& attrs = {});
// Same, but returns the status of the run instead of failing (for error tests).
StatusOr<std::vector<HostTensor>> TryRunOp(OpKind op, const std::vector<HostTensor>& inputs, const Attrs& attrs = {});

// ------------------------------------------------------------------ checking
double RelBound(DType dt);  // f32 1e-5, bf16 1e-2, f16 2e-3
// Relative L2 error over elements where ref is finite.
double RelError(const HostTensor& out, const std::vector<double>& ref);
// Float outputs: shape, every element written, NaN/Inf positions as in ref, rel error <= bound,
// reference not all zero. `what` names the case in failure messages.
void ExpectClose(const HostTensor& out, const std::vector<int64_t>& shape, const std::vector<double>& ref, double bound,
                 const std::string& what);
inline void ExpectClose(const HostTensor& out, const std::vector<int64_t>& shape, const std::vector<double>& ref,
                        const std::string& what) {
  ExpectClose(out, shape, ref, RelBound(out.dtype), what);
}
// Int / bool outputs (and exact copies): shape, every element equal; bools stored as 0/1 bytes.
void ExpectExact(const HostTensor& out, const std::vector<int64_t>& shape, const std::vector<double>& ref,
                 const std::string& what);

}  // namespace opfuse::test
