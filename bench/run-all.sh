#!/usr/bin/env bash
# Every benchmark, one after another, each writing its raw result into
# bench/results/NAME.json (what bench/results.md's tables are computed
# from: `ontime bench report bench/results`). As root on an otherwise idle
# machine, after `cargo build --release`; about an hour on 2 CPUs.
# Progress and each script's output go to $LOG_DIR (default
# /tmp/ontime-bench); touch $LOG_DIR/stop to end after the running one.
set -uo pipefail
cd "$(dirname "$0")/.."
log_dir=${LOG_DIR:-/tmp/ontime-bench}
mkdir -p bench/results "$log_dir"
run() {
  local name=$1; shift
  [ -e "$log_dir/stop" ] && return
  echo "$(date +%H:%M:%S) start $name: $*" | tee -a "$log_dir/queue.log"
  python3 "$@" --out "bench/results/$name.json" >"$log_dir/$name.out" 2>"$log_dir/$name.err"
  echo "$(date +%H:%M:%S) end $name rc=$?" | tee -a "$log_dir/queue.log"
}
run sim-speed bench/sim_speed.py
run plan-speed bench/plan_speed.py --repeat 3
run net-cost bench/net_cost.py --rounds 3 --seconds 5
run profile-analysis-speed bench/profile_analysis_speed.py --seconds 60 --repeat 3
run profile-correction bench/profile_correction.py --rounds 5
run profile-overhead bench/profile_overhead.py --rounds 7 --work 400
run observe-switch-cost bench/observe_switch_cost.py --rounds 5 --ops 300000
run cyclic-idle bench/cyclic_vs_cyclictest.py --rounds 5 --duration 10 --interval-us 500
run cyclic-kernel-load bench/cyclic_vs_cyclictest.py --rounds 5 --duration 10 --interval-us 500 --load kernel
run io-overhead bench/io_overhead.py --rounds 3 --seconds 4
run crawl-adherence bench/crawl_adherence.py
run crawl-protocols bench/crawl_protocols.py
run fleet bench/fleet.py --copies 6 --agent-seconds 60 --load-seconds 60
run observe-overhead bench/observe_overhead.py --duration 60s --reps 3
run explain-cost bench/explain_cost.py --rounds 5 --seconds 20
run fleet-probe bench/fleet_probe.py --rounds 2 --seconds 60
