/* A compute program with two known functions, timing itself, for
 * `ontime profile`'s validation (document 002's check): it alternates
 * compute_a (2 units) and compute_b (1 unit) of pure CPU work for the
 * given number of rounds and prints its elapsed (apparent) time in ns.
 * Built with frame pointers so stacks are complete. */
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
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (unsigned long r = 0; r < rounds; r++) {
        compute_a(unit);
        compute_b(unit);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
    return 0;
}
