// How much CPU time this process may use: the CPUs it may run on, capped by
// a CFS bandwidth quota (a container or systemd CPU limit). The storage server
// reports it so that the cost model charges its work to the CPU it really has.
#ifndef SOPHON_BASE_CPU_LIMIT_H_
#define SOPHON_BASE_CPU_LIMIT_H_

#include <string>

namespace sophon {

// CPUs of time per second this process may use: the CPU count of its affinity
// mask, capped by the CFS quota of its cgroup or of any ancestor (cgroup v2
// cpu.max, or v1 cpu.cfs_quota_us / cpu.cfs_period_us). At least 0.01.
double ProcessCpuLimit();

namespace internal {
// CPUs allowed by a cgroup v2 cpu.max text ("50000 100000" -> 0.5; "max ..."
// or unreadable text -> infinity).
double CpuMaxQuota(const std::string& cpu_max);
// CPUs allowed by cgroup v1 cfs_quota_us / cfs_period_us (quota <= 0 or
// period <= 0 -> infinity).
double CfsQuota(double quota_us, double period_us);
}  // namespace internal

}  // namespace sophon

#endif  // SOPHON_BASE_CPU_LIMIT_H_
