#pragma once
/// Splitting one kernel's work across the cores a worker owns.
///
/// A process-wide team of helper threads (created on first use, sleeping when idle) runs
/// parts of a job while the calling thread runs part 0. One job at a time: a second
/// worker thread that finds the team busy simply runs its job alone. With one thread
/// (the default) nothing is started and kernels run on the caller only.

#include <functional>

namespace mpakt::cpu_fast {

/// How many threads a kernel may use, the caller included (1 = no helpers). Set once at
/// start-up (`mpakt serve --threads`, `MPAKT_THREADS`); counts against the cores the
/// worker owns, with oneDNN's and the actor scheduler's threads (docs/architecture.md).
void set_kernel_threads(int n);
int kernel_threads();

/// Runs f(0) … f(parts-1) — f(0) on the caller — and returns when all have finished.
void parallel_for(int parts, const std::function<void(int)>& f);

}  // namespace mpakt::cpu_fast
