// CPU time of the calling thread and of the whole process.
#ifndef SOPHON_BASE_CPU_TIME_H_
#define SOPHON_BASE_CPU_TIME_H_

namespace sophon {

// Thread CPU time in seconds (CLOCK_THREAD_CPUTIME_ID).
double ThreadCpuSeconds();
// CPU seconds of this process, all threads, user + system.
double ProcessCpuSeconds();

}  // namespace sophon

#endif  // SOPHON_BASE_CPU_TIME_H_
