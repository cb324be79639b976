#pragma once
/// Splitting one kernel's work across the cores a worker owns.
///
/// A process-wide team of helper threads (created on first use, spinning briefly after a
/// job, then sleeping) runs parts of a job with the calling thread. Parts are claimed one
/// at a time, so a helper the OS is slow to schedule (a volunteer's machine busy with other
/// work) costs nothing: the caller takes the parts nobody claimed. One job at a time: a
/// second worker thread that finds the team busy runs its job alone. With one thread (the
/// default) nothing is started and kernels run on the caller only.

#include <functional>

namespace mpakt::cpu_fast {

/// How many threads a kernel may use, the caller included (1 = no helpers). Set once at
/// start-up (`mpakt serve --threads`, `MPAKT_THREADS`); counts against the cores the
/// worker owns, with the actor scheduler's threads (docs/architecture.md).
void set_kernel_threads(int n);
int kernel_threads();

/// Runs f(0) … f(parts-1), each once, on the caller and the helpers, and returns when all
/// have finished. More parts than threads balance uneven parts. When the caller's run is told
/// to stop (runtime/interrupt.hpp), the parts not yet begun are skipped.
void parallel_for(int parts, const std::function<void(int)>& f);

}  // namespace mpakt::cpu_fast
