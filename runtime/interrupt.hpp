#pragma once
/// Stopping inside a long kernel. While the executor runs a graph with a run_control, it names
/// on its thread a test of whether that run should stop (cancelled, or past its deadline);
/// kernels that split their work ask it between parts (cpu_fast::parallel_for, and the
/// one-thread paths of large products and attention, which split for this alone) and leave
/// the rest undone. Such a kernel's output is never read: the executor sees the same stop
/// right after the step and discards the run whole, as between steps.

namespace mpakt {

struct interrupt {
  bool (*test)(const void* context) = nullptr;
  const void* context = nullptr;
  bool requested() const { return test && test(context); }
};

namespace detail {
inline thread_local interrupt current_interrupt;
}

/// The calling thread's: the run it is executing, if any.
inline interrupt current_interrupt() { return detail::current_interrupt; }

/// Names `i` as the calling thread's interrupt for its lifetime.
class interrupt_scope {
 public:
  explicit interrupt_scope(interrupt i) : saved_(detail::current_interrupt) { detail::current_interrupt = i; }
  ~interrupt_scope() { detail::current_interrupt = saved_; }
  interrupt_scope(const interrupt_scope&) = delete;
  interrupt_scope& operator=(const interrupt_scope&) = delete;

 private:
  interrupt saved_;
};

}  // namespace mpakt
