// The host's FMA throughput in short windows: NT threads (1 or 2) each run 12 independent
// AVX2 FMA chains for 20 ms, 100 ms apart; one line per window with the GFLOP/s of all
// threads together. Shows how often the host gives the vCPUs less than their peak (on a
// 2-vCPU Zen 3, one 2-thread window in ten ran below 139 GFLOP/s of a median 182-188;
// bench/README.md, "Tools for looking closer"). Not part of the build:
//   cc -O2 -mavx2 -mfma -pthread -DNT=2 bench/fma_windows.c -o /tmp/fma_windows
//   /tmp/fma_windows 150 | sort -n | awk '{a[NR]=$1} END {print a[int(NR/10)], a[int(NR/2)], a[NR]}'
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef NT
#define NT 2
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static pthread_barrier_t start;
static double gflops[NT];

// 12 chains cover the FMA latency (4 cycles) on both FMA pipes of a Zen 3 core.
static void* run(void* arg) {
  const int id = (int)(long)arg;
  pthread_barrier_wait(&start);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  __m256 a0 = _mm256_set1_ps(1.0f), a1 = _mm256_set1_ps(1.1f), a2 = _mm256_set1_ps(1.2f),
         a3 = _mm256_set1_ps(1.3f), a4 = _mm256_set1_ps(1.4f), a5 = _mm256_set1_ps(1.5f),
         a6 = _mm256_set1_ps(1.6f), a7 = _mm256_set1_ps(1.7f), a8 = _mm256_set1_ps(1.8f),
         a9 = _mm256_set1_ps(1.9f), a10 = _mm256_set1_ps(2.0f), a11 = _mm256_set1_ps(2.1f);
  long iters = 0;
  const double t0 = now();
  double t;
  do {
    for (int r = 0; r < 1000; ++r) {
#define F(x) x = _mm256_fmadd_ps(x, m, c);
      F(a0) F(a1) F(a2) F(a3) F(a4) F(a5) F(a6) F(a7) F(a8) F(a9) F(a10) F(a11)
#undef F
    }
    iters += 1000;
    t = now();
  } while (t - t0 < 0.02);
  // Sum the chains so that the compiler keeps them; 0 * the sum keeps the figure exact.
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  float o[8];
  _mm256_storeu_ps(o, s);
  gflops[id] = iters * 12.0 * 16 / (t - t0) / 1e9 + 0 * o[0];
  return 0;
}

int main(int argc, char** argv) {
  const int windows = argc > 1 ? atoi(argv[1]) : 100;
  for (int k = 0; k < windows; ++k) {
    pthread_t th[NT];
    pthread_barrier_init(&start, 0, NT);
    for (int i = 0; i < NT; ++i) pthread_create(&th[i], 0, run, (void*)(long)i);
    double total = 0;
    for (int i = 0; i < NT; ++i) {
      pthread_join(th[i], 0);
      total += gflops[i];
    }
    pthread_barrier_destroy(&start);
    printf("%.1f\n", total);
    const struct timespec pause = {0, 100000000};
    nanosleep(&pause, 0);
  }
  return 0;
}
