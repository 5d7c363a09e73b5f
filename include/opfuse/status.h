// Status / StatusOr<T>: how every API boundary of opfuse reports failure.
// Library code never calls exit(); the CLI maps kInvalidArgument (bad input) to exit code 2 and
// everything else to 1. Messages are one line and name the problem (and the line, for parsers).
#pragma once
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace opfuse {

enum class StatusCode { kOk, kInvalidArgument, kNotFound, kUnimplemented, kInternal, kUnavailable };

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

// Thrown only by ValueOrDie-style helpers in tests and tools; library code returns Status.
struct StatusError : std::runtime_error {
  explicit StatusError(Status s) : std::runtime_error(s.ToString()), status(std::move(s)) {}
  Status status;
};

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}           // NOLINT: implicit on purpose
  StatusOr(Status status) : v_(std::move(status)) {     // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "StatusOr built from Ok status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { check(); return std::get<T>(v_); }
  const T& value() const& { check(); return std::get<T>(v_); }
  T&& value() && { check(); return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void check() const {
    if (!ok()) throw StatusError(std::get<Status>(v_));
  }
  std::variant<T, Status> v_;
};

}  // namespace opfuse

#define OPFUSE_CONCAT_INNER(a, b) a##b
#define OPFUSE_CONCAT(a, b) OPFUSE_CONCAT_INNER(a, b)
#define OPFUSE_RETURN_IF_ERROR(expr)             \
  do {                                           \
    ::opfuse::Status _st = (expr);               \
    if (!_st.ok()) return _st;                   \
  } while (0)
#define OPFUSE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
#define OPFUSE_ASSIGN_OR_RETURN(lhs, expr) \
  OPFUSE_ASSIGN_OR_RETURN_IMPL(OPFUSE_CONCAT(_so_, __LINE__), lhs, expr)
