#!/bin/sh
# ontime's in-guest agent (document 002): dumps what the host needs to name
# guest addresses: the guest kernel's symbols, every process with its
# executable mappings, and the CR3 of each process where the guest can read
# it (it usually cannot from user space: then it says so). POSIX sh and
# busybox only; run as root (kernel addresses are hidden from others).
# Writes to standard output between markers, so it can travel over a
# serial console: ontime profile agent > agent.sh; copy it in; sh agent.sh.
set -u
echo "ontime-guest-dump 1"
echo "kernel $(uname -r)"
echo "time $(date +%s)"
for d in /proc/[0-9]*; do
  pid="${d#/proc/}"
  [ -r "$d/maps" ] || continue
  comm="$(cat "$d/comm" 2>/dev/null)" || continue
  echo "process $pid $comm"
  while read -r range perms offset dev inode path; do
    case "$perms" in
      *x*) echo "map $pid $range $perms $offset $dev $inode $path" ;;
    esac
  done < "$d/maps"
done
echo "cr3 unavailable: not readable from user space in this guest"
if [ -r /proc/kallsyms ]; then
  # Text symbols only (what a PC can be in).
  sed -n 's/^\([0-9a-f]*\) [tTwW] \([^ 	]*\).*/ksym \1 \2/p' /proc/kallsyms
else
  echo "ksym unavailable: /proc/kallsyms not readable"
fi
echo "ontime-guest-dump end"
