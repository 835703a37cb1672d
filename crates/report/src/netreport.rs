//! The report's "Real-time channels (document 003)" section: per run and
//! flow, what its channel was (admitted, refused with the reason, or none),
//! the end-to-end delay distribution the receiver measured, misses, the
//! queueing delay at the bottleneck and the receiver check's counts; per
//! run, what best effort still got, what was dropped, what the stamp, the
//! check and the scheduler cost per packet and what the controller did.
//! Figures: each flow's delay percentiles across the runs' settings, and
//! for runs where the controller escalated, the time line of each flow's
//! worst delay per 100 ms.
use crate::html::esc;
use anyhow::Result;
use ontime_core::duration::format_ns;
use ontime_net::controller::ControllerReport;
use ontime_net::flow::FlowResult;
use ontime_plot::{Chart, Scale};
use ontime_scenario::results::RunResults;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What one run's net files hold, read once.
pub struct NetRunView {
    pub run: String,
    pub label: String,
    pub duration_ns: u64,
    pub flows: Vec<(ontime_scenario::record::FlowOutcome, Option<FlowResult>)>,
    pub controller: Option<ControllerReport>,
    pub relay: Option<ontime_net::relay::ChannelReport>,
    /// Best effort received, Mbit/s, as iperf3 measured it (sum of clients).
    pub best_effort_mbit: Option<f64>,
    /// The relay thread's part of each channel's worst misses, explained
    /// on the run's recording.
    pub relay_part: Option<ontime_explain::kept::NetExplanation>,
}

/// What iperf3's UDP clients say their server received, Mbit/s in all.
fn best_effort_received(dir: &Path, files: &[String]) -> Option<f64> {
    let mut total = None;
    for f in files {
        let v: serde_json::Value = ontime_scenario::results::read_json(&dir.join(f), "iperf3 result").ok()?;
        let s = v.get("end")?.get("sum")?;
        let bps = s.get("bits_per_second")?.as_f64()?;
        let lost = s.get("lost_percent").and_then(|l| l.as_f64()).unwrap_or(0.0);
        *total.get_or_insert(0.0) += bps * (1.0 - lost / 100.0) / 1e6;
    }
    total
}

pub fn views(runs: &[RunResults]) -> Vec<NetRunView> {
    runs.iter()
        .filter_map(|r| {
            let net = r.record.net.as_ref()?;
            let flows = net
                .flows
                .iter()
                .map(|f| {
                    let res = f.result.as_ref().and_then(|p| {
                        ontime_scenario::results::read_json::<FlowResult>(&r.dir.join(p), "flow result").ok()
                    });
                    (f.clone(), res)
                })
                .collect();
            let controller = net
                .controller
                .as_ref()
                .and_then(|p| ontime_scenario::results::read_json(&r.dir.join(p), "controller report").ok());
            Some(NetRunView {
                run: r.name.clone(),
                label: ontime_scenario::scenario::vars_text(&r.record.vars),
                duration_ns: r.record.config.duration,
                flows,
                controller,
                relay: r.record.relay.as_ref().and_then(|x| x.channels.clone()),
                best_effort_mbit: best_effort_received(&r.dir, &net.best_effort),
                relay_part: ontime_scenario::results::read_json(
                    &r.dir.join(ontime_explain::kept::NET_EXPLANATION),
                    "net explanation",
                )
                .ok(),
            })
        })
        .collect()
}

fn ms(v: Option<u64>) -> String {
    v.map(format_ns).unwrap_or_else(|| "-".into())
}

/// One figure per flow: p50, p99, p99.9 and max of the end-to-end delay
/// for each run setting (repetitions pooled by taking the worst).
pub fn charts(views: &[NetRunView], charts: &mut Vec<Chart>) {
    let mut labels: Vec<String> = Vec::new();
    for v in views {
        if !labels.contains(&v.label) {
            labels.push(v.label.clone());
        }
    }
    let mut names: Vec<String> = Vec::new();
    for v in views {
        for (f, _) in &v.flows {
            if !names.contains(&f.name) {
                names.push(f.name.clone());
            }
        }
    }
    if labels.len() < 2 {
        // One setting: the table says it all.
        return;
    }
    for name in &names {
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        let mut deadline = None;
        for (pname, p) in [
            ("p50", Some(50.0)),
            ("p99", Some(99.0)),
            ("p99.9", Some(99.9)),
            ("max", None),
        ] {
            let mut pts = Vec::new();
            for (x, label) in labels.iter().enumerate() {
                let worst = views
                    .iter()
                    .filter(|v| &v.label == label)
                    .flat_map(|v| v.flows.iter())
                    .filter(|(f, _)| &f.name == name)
                    .filter_map(|(f, r)| {
                        deadline = Some(f.deadline_ns);
                        let d = &r.as_ref()?.delay;
                        match p {
                            Some(p) => d.percentile(p),
                            None => d.max_ns,
                        }
                    })
                    .max();
                if let Some(w) = worst {
                    pts.push((x as f64, w as f64 / 1e6));
                }
            }
            if !pts.is_empty() {
                series.push((pname.to_string(), pts));
            }
        }
        if series.is_empty() {
            continue;
        }
        let mut c = Chart::new(
            "figure",
            format!("Flow {name}: end-to-end delay per setting (worst repetition)"),
            "setting",
            "one-way delay (ms)",
        );
        c.x_labels = Some(labels.clone());
        // Settings are categories, not a scale: points, not lines.
        c.points_only = true;
        c.series = series;
        c.y_scale = Scale::Log;
        c.size = (1000, 560);
        c.limit = deadline.map(|d| ("deadline".to_string(), d as f64 / 1e6));
        charts.push(c);
    }
}

/// The time line of a run: each flow's worst delay per bin (ms) against
/// time (s).
fn timeline(v: &NetRunView) -> Option<Chart> {
    let mut series = Vec::new();
    for (f, r) in &v.flows {
        let Some(r) = r else { continue };
        let pts: Vec<(f64, f64)> = r
            .series
            .iter()
            .filter(|b| b.packets > 0)
            .map(|b| (b.t_ns as f64 / 1e9, b.max_delay_ns.max(1) as f64 / 1e6))
            .collect();
        series.push((format!("{} (deadline {})", f.name, format_ns(f.deadline_ns)), pts));
    }
    if series.is_empty() {
        return None;
    }
    let escalations: Vec<String> = v
        .controller
        .iter()
        .flat_map(|c| c.actions.iter())
        .filter(|a| a.kind == "escalated")
        .map(|a| format!("{:.1} s", a.at_ns as f64 / 1e9))
        .collect();
    let mut c = Chart::new(
        "timeline",
        format!(
            "{}: worst delay per 100 ms; escalations at {}",
            v.run,
            if escalations.is_empty() {
                "none".into()
            } else {
                escalations.join(", ")
            }
        ),
        "time since the receivers started (s)",
        "worst one-way delay in the bin (ms)",
    );
    c.series = series;
    c.y_scale = Scale::Log;
    c.size = (1000, 520);
    Some(c)
}

pub fn section(views: &[NetRunView], out: &Path) -> Result<(String, Vec<PathBuf>)> {
    let mut h = String::new();
    let mut pngs = Vec::new();
    if views.is_empty() {
        return Ok((h, pngs));
    }
    h.push_str(
        "<h2 id=net>Real-time channels (document 003)</h2><p>Each flow is a paced UDP sender in a tenant and a receiver that \
timed every datagram from the send call to its return from recv (one host clock). A channel's packets were stamped with their deadline \
(MPLS label, tc-BPF at the sender's interface) and checked at the receiver's (XDP); the relay was the bottleneck: reservations by WFQ, \
deadline channels by EDF, best effort last (ahead of deadline packets only while their deadlines stay safe, keeping the scenario's guard). \
Queueing = arrival at the relay to departure, per class. Document 003 measured, on 1 Gbit/s under 1.1 Gbit/s of best effort, \
a worst delay of 3.6 ms for flow A (5 ms deadline) and 8.7 ms for B (10 ms) with RTvNIC, 13.9 / 14.0 ms without.</p>\
<table><tr><th>run</th><th>flow</th><th>channel</th><th>deadline</th><th>received</th><th>lost</th><th>misses</th><th>p50</th><th>p99</th>\
<th>p99.9</th><th>max</th><th>max / deadline</th><th>jitter</th><th>queueing p99</th><th>check on time / missed</th></tr>",
    );
    for v in views {
        for (f, r) in &v.flows {
            let channel_text = match (f.channel, &f.refused) {
                (Some(id), _) => {
                    let kind = v
                        .controller
                        .as_ref()
                        .and_then(|c| {
                            c.channels
                                .iter()
                                .find(|c| c.has_dscp(id) && c.from == ontime_core::names::tenant_name(f.from))
                        })
                        .map(|c| {
                            let esc = if c.priority { ", escalated" } else { "" };
                            match c.reserved_bps {
                                Some(b) => format!("{id}: reservation, R {:.2} Mbit/s{esc}", b / 1e6),
                                None => format!("{id}: deadline{esc}"),
                            }
                        })
                        .unwrap_or_else(|| id.to_string());
                    kind
                }
                (None, Some(why)) => format!("refused: {why}"),
                (None, None) => "none (best effort)".into(),
            };
            let class = match f.channel {
                Some(id) => format!("channel {id}"),
                None => "best effort".into(),
            };
            let queue = v
                .relay
                .as_ref()
                .and_then(|c| c.delay_by_class.get(&class))
                .and_then(|s| s.percentile(99.0));
            let check = f
                .channel
                .and_then(|id| {
                    v.controller
                        .as_ref()?
                        .channels
                        .iter()
                        .find(|c| c.has_dscp(id))
                        .map(|c| format!("{} / {}", c.counts.on_time, c.counts.missed))
                })
                .unwrap_or_else(|| "-".into());
            match r {
                Some(r) => {
                    let _ = write!(
                        h,
                        "<tr><td class=l>{}</td><td>{}</td><td class=l>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        esc(&v.label),
                        esc(&f.name),
                        esc(&channel_text),
                        format_ns(f.deadline_ns),
                        r.received,
                        r.lost,
                        r.misses,
                        ms(r.delay.percentile(50.0)),
                        ms(r.delay.percentile(99.0)),
                        ms(r.delay.percentile(99.9)),
                        ms(r.delay.max_ns),
                        r.delay
                            .max_ns
                            .map(|m| format!("{:.0} %", m as f64 / f.deadline_ns as f64 * 100.0))
                            .unwrap_or_else(|| "-".into()),
                        format_ns(r.jitter_ns),
                        ms(queue),
                        check
                    );
                }
                None => {
                    let _ = write!(
                        h,
                        "<tr><td class=l>{}</td><td>{}</td><td class=l>{}</td><td>{}</td><td colspan=11>no receiver result</td></tr>",
                        esc(&v.label),
                        esc(&f.name),
                        esc(&channel_text),
                        format_ns(f.deadline_ns)
                    );
                }
            }
        }
    }
    h.push_str("</table>");
    h.push_str(
        "<h3>Bottleneck and data path per run</h3><table><tr><th>run</th><th>best effort received (iperf3)</th><th>best effort dropped</th>\
<th>channel frames dropped (own buffer full)</th><th>late at the link</th><th>scheduler per frame</th><th>stamp per packet</th>\
<th>check per packet</th><th>escalations</th><th>refusals</th></tr>",
    );
    for v in views {
        let be = v
            .best_effort_mbit
            .map(|m| format!("{m:.1} Mbit/s"))
            .unwrap_or_else(|| "-".into());
        let (be_drop, ch_drop, late, sched) = match &v.relay {
            Some(c) => (
                c.stats.best_effort_dropped.to_string(),
                c.stats.channel_dropped.to_string(),
                c.stats.late.to_string(),
                format!("{:.0} ns", c.scheduler_ns_per_frame),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let cost = v.controller.as_ref().and_then(|c| c.cost);
        let per = |x: Option<f64>| x.map(|n| format!("{n:.0} ns")).unwrap_or_else(|| "not measured".into());
        let count = |k: &str| {
            v.controller
                .as_ref()
                .map(|c| c.actions.iter().filter(|a| a.kind == k).count())
                .unwrap_or(0)
        };
        let _ = write!(
            h,
            "<tr><td class=l>{}</td><td>{be}</td><td>{be_drop}</td><td>{ch_drop}</td><td>{late}</td><td>{sched}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&v.label),
            per(cost.and_then(|c| c.stamp_ns_per_packet())),
            per(cost.and_then(|c| c.check_ns_per_packet())),
            count("escalated"),
            count("refused"),
        );
    }
    h.push_str(
        "</table><p>Best effort received is iperf3's own measure (its server's bytes over its test time, the run's duration, all clients). The scheduler's time is its enqueue and dequeue \
per frame sent, clock reads included; stamp and check are the kernel's own run-time statistics of the BPF programs \
(kernel.bpf_stats_enabled during the run); the stamp runs on every packet a tenant sends, channel or not.</p>",
    );
    h.push_str(&why_missed(views));
    // The controller's log of runs where something happened beyond admissions.
    for v in views {
        let Some(c) = &v.controller else { continue };
        let notable: Vec<_> = c.actions.iter().filter(|a| a.kind != "admitted").collect();
        if notable.is_empty() {
            continue;
        }
        let _ = write!(
            h,
            "<h3>Controller log: {}</h3><table><tr><th>time</th><th>action</th><th>what</th></tr>",
            esc(&v.label)
        );
        for a in notable {
            let _ = write!(
                h,
                "<tr><td>{:.3} s</td><td>{}</td><td class=l>{}</td></tr>",
                a.at_ns as f64 / 1e9,
                esc(&a.kind),
                esc(&a.message)
            );
        }
        h.push_str("</table>");
        if c.actions.iter().any(|a| a.kind == "escalated") {
            if let Some(chart) = timeline(v) {
                let png = out.join(format!("net-timeline-{}.png", v.run));
                chart.png(&png)?;
                pngs.push(png);
                h.push_str(&chart.svg()?);
            }
        }
    }
    Ok((h, pngs))
}

/// Per run and channel with misses: what their overruns were made of, from
/// the relay's record of each missed frame (docs/net.md, "Why a packet
/// missed").
fn why_missed(views: &[NetRunView]) -> String {
    let mut rows = String::new();
    for v in views {
        let Some(c) = &v.controller else { continue };
        for m in &c.miss_causes {
            let worst = m
                .worst
                .first()
                .map(|w| {
                    let parts: Vec<String> = w
                        .parts
                        .iter()
                        .map(|p| format!("{} {}", format_ns(p.ns), p.part.words()))
                        .collect();
                    format!("{}: {}", format_ns(w.overrun_ns), parts.join(", "))
                })
                .unwrap_or_default();
            let relay = v
                .relay_part
                .as_ref()
                .and_then(|x| x.channels.iter().find(|c| c.channel == m.channel))
                .map(|c| relay_causes(&c.explanation))
                .unwrap_or_else(|| "-".into());
            let _ = write!(
                rows,
                "<tr><td class=l>{}</td><td class=l>{} from {}</td><td>{} of {}</td><td class=l>{}</td><td class=l>{}</td><td class=l>{}</td></tr>",
                esc(&v.label),
                m.channel,
                esc(&m.from),
                m.with_path,
                m.misses,
                esc(&m.sentence()),
                esc(&relay),
                esc(&worst)
            );
        }
    }
    let mut flows = String::new();
    for v in views {
        for f in v.relay_part.iter().flat_map(|x| x.flows.iter()) {
            let _ = write!(
                flows,
                "<tr><td class=l>{}</td><td>{}</td><td class=l>{}</td></tr>",
                esc(&v.label),
                esc(&f.flow),
                esc(&f.explanation.sentence(ontime_explain::kept::FLOW_WHAT))
            );
        }
    }
    if !flows.is_empty() {
        flows = format!(
            "<p>End to end (the sender's send call to the receiver's return from recv), each flow's worst late datagrams explained \
as late events of the receiving thread: asleep with the datagram not yet in is the way there (blocked, woken by the network's \
softirq); queued or running after it arrived is the receiver's own.</p><table><tr><th>run</th><th>flow</th><th>why late</th></tr>{flows}</table>"
        );
    }
    if rows.is_empty() {
        return flows;
    }
    format!(
        "<h3>Why packets missed their deadlines</h3><p>Each miss the receiver's check reported, joined with the relay's record of \
the frame: its overrun split into where the frame was once its budget's slack was spent (held on the sender's side before the relay \
received it, received by the host and not yet read by the relay, queued behind other frames at the link, the relay late to send it with the link free, \
on the receiver's side). The parts add up to the overrun. The relay's part of the 20 worst misses of each channel is explained on \
the run's recording as late events of the relay's thread (queued behind whom, busy with other frames, asleep).</p><table><tr><th>run</th>\
<th>channel</th><th>recorded</th><th>why</th><th>the relay's part, on its thread's time line</th><th>worst miss</th></tr>{rows}</table>{flows}"
    )
}

/// "2.1 ms: 80 % waiting for CPU 0 behind iperf3, 20 % running its own work":
/// the relay thread's part of a channel's worst misses, by cause.
pub(crate) fn relay_causes(x: &ontime_explain::summary::RunExplanation) -> String {
    if x.explained == 0 {
        return "not explained".into();
    }
    format!("{}: {}", format_ns(x.lateness_ns), x.largest_causes())
}
