//! The `ontime` command: parses the command line, runs one verb, maps the
//! outcome to an exit code (0 ok, 1 failure, 2 bad input: a clap error or
//! an [`ontime_core::BadInput`] from any verb; 128 + the signal's number
//! when a verb says a stop signal cut its work short,
//! [`signals::Interrupted`]). All work lives in the library crates.

mod cmd_bench;
mod cmd_crawl;
mod cmd_cyclic;
mod cmd_explain;
mod cmd_fleet;
mod cmd_gateway;
mod cmd_io;
mod cmd_lab;
mod cmd_net;
mod cmd_observe;
mod cmd_plan;
mod cmd_probe;
mod cmd_profile;
mod cmd_sim;
mod cmd_top;
mod cmd_wire;
mod explain;
mod flags;
mod output;
mod signals;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ontime",
    version,
    about = "Evaluate, explain, guarantee and plan the timeliness of monitoring and control software on shared hosts",
    long_about = None,
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Subcommand)]
enum Verb {
    /// Serve emulated building gateways for the crawler to poll
    Gateway(cmd_gateway::GatewayArgs),
    /// Poll building gateways on a fixed period and measure timeliness
    Crawl(cmd_crawl::CrawlArgs),
    /// Periodic wake-up probe (cyclictest's job; missed periods count)
    Cyclic(cmd_cyclic::CyclicArgs),
    /// Measure a poller ontime did not write from its packets (HTTP, Modbus/TCP, BACnet/IP)
    Wire(cmd_wire::WireArgs),
    /// Why each late poll or wake-up was late, from a probe's kept late events and a recording
    Explain(cmd_explain::ExplainArgs),
    /// Sandboxed tenants, host relay, loads: run scenarios and report them
    Lab(cmd_lab::LabArgs),
    /// Who used the CPU, at which millisecond, and who waited (scheduler events by BPF)
    Observe(cmd_observe::ObserveArgs),
    /// Stacks joined with the scheduler's time line: steal and I/O wait charged to functions (document 002)
    Profile(cmd_profile::ProfileArgs),
    /// I/O at the application, virtual-disk and physical-disk layers: which cache absorbed what (document 004)
    Io(cmd_io::IoArgs),
    /// Real-time channels between tenants: controller, channels, misses, measured flows (document 003)
    Net(cmd_net::NetArgs),
    /// Run a lab scenario in the scheduling simulator (crawler tenants)
    Sim(cmd_sim::SimArgs),
    /// Place tenants onto hosts so every one keeps its target; predict a placement
    Plan(Box<cmd_plan::PlanArgs>),
    /// Record this host continuously and publish each window to NATS JetStream (the fleet)
    Agent(cmd_fleet::AgentArgs),
    /// Analyse the fleet's windows as one worker of a pool (NATS JetStream)
    Analyse(cmd_fleet::AnalyseArgs),
    /// One view of every host: the analysed windows, anomalies, agents
    Fleet(cmd_fleet::FleetArgs),
    /// Benchmark results: tables, ratios and verdicts from bench/*.py's raw files
    Bench(cmd_bench::BenchArgs),
    /// Run the probe a typed spec describes (the lab's tenants run this)
    #[command(hide = true)]
    Probe(cmd_probe::ProbeArgs),
}

/// Parses the command line; a usage error becomes one line on stderr and
/// exit code 2 (help and version print as usual).
fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    // "--rate -5" is a value out of range, said as such by the verb's own
    // check, not "unexpected argument '-5'".
    fn negative_numbers_are_values(cmd: clap::Command) -> clap::Command {
        let names: Vec<String> = cmd.get_subcommands().map(|c| c.get_name().to_string()).collect();
        let mut cmd = cmd.allow_negative_numbers(true);
        for n in names {
            cmd = cmd.mut_subcommand(n, negative_numbers_are_values);
        }
        cmd
    }
    let parsed = negative_numbers_are_values(Cli::command())
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                e.exit();
            }
            let text = e.render().to_string();
            let mut parts: Vec<String> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .map(|l| l.trim_start_matches("error: ").to_string())
                .collect();
            if e.kind() == ErrorKind::UnknownArgument {
                // "--delay -1s": a negative duration read as a flag.
                let negative = std::env::args().any(|a| {
                    a.strip_prefix('-')
                        .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit() || c == '.'))
                });
                if negative {
                    parts.push("durations, rates and counts cannot be negative".into());
                }
            }
            parts.push("see --help".into());
            ontime_core::errln!("ontime: error: {}", parts.join("; "));
            std::process::exit(2);
        }
    }
}

fn main() {
    let cli = parse();
    let result = match cli.verb {
        Verb::Gateway(a) => cmd_gateway::run(a),
        Verb::Crawl(a) => cmd_crawl::run(a),
        Verb::Wire(a) => cmd_wire::run(a),
        Verb::Cyclic(a) => cmd_cyclic::run(a),
        Verb::Explain(a) => cmd_explain::run(a),
        Verb::Lab(a) => cmd_lab::run(a),
        Verb::Observe(a) => cmd_observe::run(a),
        Verb::Profile(a) => cmd_profile::run(a),
        Verb::Agent(a) => cmd_fleet::agent(a),
        Verb::Analyse(a) => cmd_fleet::analyse(a),
        Verb::Fleet(a) => cmd_fleet::fleet(a),
        Verb::Io(a) => cmd_io::run(a),
        Verb::Net(a) => cmd_net::run(a),
        Verb::Sim(a) => cmd_sim::run(a),
        Verb::Plan(a) => cmd_plan::run(*a),
        Verb::Bench(a) => cmd_bench::run(a),
        Verb::Probe(a) => cmd_probe::run(a),
    };
    if let Err(e) = result {
        // The verb has said what it kept; the code says how it ended.
        if let Some(i) = e.downcast_ref::<signals::Interrupted>() {
            std::process::exit(i.exit_code());
        }
        // Bad input is exit 2 wherever it arose (anyhow finds it through
        // any context added on the way up); everything else is a failure.
        let code = if e.downcast_ref::<ontime_core::BadInput>().is_some() {
            2
        } else {
            1
        };
        ontime_core::errln!("ontime: error: {e:#}");
        std::process::exit(code);
    }
}
