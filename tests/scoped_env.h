// ScopedEnv: sets (or, with nullptr, unsets) an environment variable for a scope and restores what
// was there before on exit — also when an assertion leaves the test early. For tests of code that
// reads the environment when it runs (OPFUSE_DISABLE, OPFUSE_ATTENTION_*, the cache directory).
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

namespace opfuse::testing_env {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace opfuse::testing_env
