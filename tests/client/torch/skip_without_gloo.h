// Tests whose ranks meet on the CPU, which takes c10d's Gloo backend: a build
// without it (against a pip wheel's LibTorch, which ships no gloo headers)
// skips them, saying why, instead of failing on the refused backend.
#ifndef SOPHON_TESTS_CLIENT_TORCH_SKIP_WITHOUT_GLOO_H_
#define SOPHON_TESTS_CLIENT_TORCH_SKIP_WITHOUT_GLOO_H_

#include "client/torch/process_group.h"
#include "gtest/gtest.h"

#define SOPHON_SKIP_WITHOUT_GLOO()                                          \
  if (!::sophon::BuiltBackends().gloo) {                                    \
    GTEST_SKIP() << "this build has no Gloo backend: ranks on CPU need it"; \
  }

#endif  // SOPHON_TESTS_CLIENT_TORCH_SKIP_WITHOUT_GLOO_H_
