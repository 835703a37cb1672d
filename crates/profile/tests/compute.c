/* A compute program with two known functions, timing itself, for
 * `ontime profile`'s validation (document 002's check): it alternates
 * compute_a (2 units) and compute_b (1 unit) of pure CPU work for the
 * given number of rounds and prints its elapsed (apparent) time in ns,
 * then its own on-CPU time and run delay from /proc/self/schedstat (the
 * kernel's accounting, read before it exits). Built at -O0 with frame
 * pointers so that every function keeps its frame. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void spin(unsigned long n) {
    unsigned long x = 1;
    for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
}

__attribute__((noinline)) void compute_a(unsigned long n) { spin(2 * n); }
__attribute__((noinline)) void compute_b(unsigned long n) { spin(n); }

int main(int argc, char **argv) {
    unsigned long rounds = argc > 1 ? strtoul(argv[1], 0, 10) : 100;
    unsigned long unit = argc > 2 ? strtoul(argv[2], 0, 10) : 1000000;
    /* "wait": start when a byte arrives on stdin (a recorder is ready). */
    if (argc > 3 && argv[3][0] == 'w') {
        char c;
        if (fread(&c, 1, 1, stdin) != 1) return 1;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (unsigned long r = 0; r < rounds; r++) {
        compute_a(unit);
        compute_b(unit);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    unsigned long long on_cpu = 0, run_delay = 0;
    FILE *f = fopen("/proc/self/schedstat", "r");
    if (f) {
        if (fscanf(f, "%llu %llu", &on_cpu, &run_delay) != 2) on_cpu = run_delay = 0;
        fclose(f);
    }
    printf("%lld %llu %llu\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec),
           on_cpu, run_delay);
    return 0;
}
