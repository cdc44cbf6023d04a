// Small helpers for absl::Status propagation.
#ifndef SOPHON_BASE_STATUS_MACROS_H_
#define SOPHON_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SOPHON_CONCAT_INNER_(a, b) a##b
#define SOPHON_CONCAT_(a, b) SOPHON_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` is not OK.
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::absl::Status _sophon_status = (expr);      \
    if (!_sophon_status.ok()) return _sophon_status; \
  } while (0)

// ASSIGN_OR_RETURN(auto x, Compute()); declares/assigns x or returns the error.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL_(SOPHON_CONCAT_(_sophon_statusor_, __LINE__), lhs, rexpr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                           \
  if (!statusor.ok()) return statusor.status();      \
  lhs = std::move(statusor).value()

#endif  // SOPHON_BASE_STATUS_MACROS_H_
