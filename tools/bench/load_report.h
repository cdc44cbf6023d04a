// sophon-bench-load's report of a LoadResult: a human-readable summary and
// one JSON line (the project's JsonWriter) that tools/bench/load tabulates.
#ifndef SOPHON_TOOLS_BENCH_LOAD_REPORT_H_
#define SOPHON_TOOLS_BENCH_LOAD_REPORT_H_

#include <string>
#include <vector>

#include "tools/bench/load_run.h"

namespace sophon {

// Jain's fairness index of `x`: (sum x)^2 / (n sum x^2); 1 when all are
// equal, 1/n when one has everything. 1 for an empty or all-zero list.
double JainIndex(const std::vector<double>& x);

std::string LoadSummary(const LoadResult& r);
// One line, ending in a newline.
std::string LoadJson(const LoadResult& r);

}  // namespace sophon

#endif  // SOPHON_TOOLS_BENCH_LOAD_REPORT_H_
