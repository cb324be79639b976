/* Read-bandwidth probe for bench/peer_bench.py: T threads each sum their own slice of one
 * buffer (first touched by the thread that reads it), started together behind a barrier; the
 * wall time from the barrier to the last thread's end gives bytes / second. Prints one JSON
 * line: {"threads": T, "bytes": N, "best_Bps": ..., "runs_Bps": [...]}.
 *
 * Build: cc -O3 -march=native -pthread read_bw.c -o read_bw
 * Usage: read_bw THREADS [MiB (default 1024)] [RUNS (default 5)]
 *
 * 32 independent 64-bit accumulators per thread (four 512-bit vectors) keep several vector
 * adds in flight, so the loop is bound by loads, not by the add chain (a STREAM-like read). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  uint64_t* p;
  size_t n; /* uint64 words */
  int runs;
  pthread_barrier_t* start;
  pthread_barrier_t* done;
  volatile uint64_t sink;
} slice;

static uint64_t sum_words(const uint64_t* restrict p, size_t n) {
  uint64_t a[32] = {0};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 32; ++k) a[k] += p[i + k];
  for (; i < n; ++i) a[0] += p[i];
  uint64_t s = 0;
  for (int k = 0; k < 32; ++k) s += a[k];
  return s;
}

static void* worker(void* arg) {
  slice* s = (slice*)arg;
  for (size_t i = 0; i < s->n; ++i) s->p[i] = i; /* first touch: pages local to this thread */
  s->sink += sum_words(s->p, s->n);               /* warm-up pass */
  for (int r = 0; r < s->runs; ++r) {
    pthread_barrier_wait(s->start);
    s->sink += sum_words(s->p, s->n);
    pthread_barrier_wait(s->done);
  }
  return NULL;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
  int runs = argc > 3 ? atoi(argv[3]) : 5;
  if (threads < 1 || mib < 1 || runs < 1) {
    fprintf(stderr, "usage: read_bw THREADS [MiB] [RUNS]\n");
    return 2;
  }
  size_t words = mib * 1024 * 1024 / 8, per = words / (size_t)threads;
  uint64_t* buf = aligned_alloc(4096, words * 8);
  if (!buf) {
    fprintf(stderr, "read_bw: out of memory\n");
    return 1;
  }
  pthread_barrier_t start, done;
  pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
  pthread_barrier_init(&done, NULL, (unsigned)threads + 1);
  slice* s = calloc((size_t)threads, sizeof(slice));
  pthread_t* tid = calloc((size_t)threads, sizeof(pthread_t));
  for (int t = 0; t < threads; ++t) {
    s[t].p = buf + (size_t)t * per;
    s[t].n = per;
    s[t].runs = runs;
    s[t].start = &start;
    s[t].done = &done;
    pthread_create(&tid[t], NULL, worker, &s[t]);
  }
  double best = 0;
  printf("{\"threads\": %d, \"bytes\": %zu, \"runs_Bps\": [", threads, per * (size_t)threads * 8);
  for (int r = 0; r < runs; ++r) {
    pthread_barrier_wait(&start);
    double t0 = now();
    pthread_barrier_wait(&done);
    double bps = (double)(per * (size_t)threads * 8) / (now() - t0);
    if (bps > best) best = bps;
    printf("%s%.0f", r ? ", " : "", bps);
  }
  printf("], \"best_Bps\": %.0f}\n", best);
  for (int t = 0; t < threads; ++t) pthread_join(tid[t], NULL);
  free(buf);
  return 0;
}
