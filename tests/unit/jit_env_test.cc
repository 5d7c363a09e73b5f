// The JIT's environment knobs (src/jit/jit_env.h): a set knob is used and reported, a malformed or
// out-of-range one is rejected with the reason and the default kept, a switch is off only at "0".
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "jit/jit_env.h"

namespace opfuse::jit {
namespace {

constexpr const char* kKnob = "OPFUSE_TEST_JIT_KNOB";

int Knob() {
  return EnvKnob(kKnob, 7, "in [1, 64]", [](long n) { return n >= 1 && n <= 64; },
                 [](long n) { return "knob " + std::to_string(n); });
}

TEST(JitEnv, KnobUsedRejectedOrDefault) {
  struct Case {
    const char* value;  // nullptr: unset
    int want;
    const char* says;  // on stderr ("" = nothing)
  };
  const Case cases[] = {
      {nullptr, 7, ""},
      {"", 7, ""},
      {"12", 12, "opfuse jit: knob 12 (OPFUSE_TEST_JIT_KNOB)"},
      {"0", 7, "OPFUSE_TEST_JIT_KNOB=0 is not in [1, 64]; using 7"},
      {"65", 7, "OPFUSE_TEST_JIT_KNOB=65 is not in [1, 64]; using 7"},
      {"8x", 7, "OPFUSE_TEST_JIT_KNOB=8x is not in [1, 64]; using 7"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.value ? c.value : "(unset)");
    if (c.value) setenv(kKnob, c.value, 1);
    else unsetenv(kKnob);
    testing::internal::CaptureStderr();
    EXPECT_EQ(Knob(), c.want);
    const std::string err = testing::internal::GetCapturedStderr();
    if (*c.says) EXPECT_NE(err.find(c.says), std::string::npos) << err;
    else EXPECT_EQ(err, "");
  }
  unsetenv(kKnob);
}

TEST(JitEnv, SwitchOffOnlyAtZero) {
  constexpr const char* kSwitch = "OPFUSE_TEST_JIT_SWITCH";
  for (const char* v : {"", "1", "no", "00"}) {
    setenv(kSwitch, v, 1);
    testing::internal::CaptureStderr();
    EXPECT_TRUE(EnvSwitch(kSwitch, "off")) << v;
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << v;
  }
  setenv(kSwitch, "0", 1);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(EnvSwitch(kSwitch, "the thing is off"));
  EXPECT_NE(testing::internal::GetCapturedStderr().find("opfuse jit: the thing is off (OPFUSE_TEST_JIT_SWITCH=0)"), std::string::npos);
  unsetenv(kSwitch);
}

}  // namespace
}  // namespace opfuse::jit
