//! `spoold-attempt`: the supervisor of one task attempt, as a program of its own. The daemon
//! starts one per attempt (`spoold-attempt --supervise-attempt`, the control socket as stdin)
//! when it finds it installed beside its own executable and speaking its protocol; the code is
//! `spoold --supervise-attempt`'s (`spoold::tasks::supervisor`), without the daemon around it:
//! an executable a tenth of the daemon's size, which is most of what starting a supervisor
//! costs. Exit codes: the supervisor's (0, 2, 3: see `supervisor::main`); 2 for any other
//! command line.

use std::process::ExitCode;

use spoold::tasks::supervision;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    match args.first() {
        Some(arg) if args.len() == 1 && arg == supervision::ARG => {
            spoold::tasks::supervisor::main()
        }
        Some(arg) if args.len() == 1 && arg == "--version" => {
            println!("{}", supervision::version_line());
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!(
                "{}: the supervisor of one spoold task attempt, started by spoold (not by hand); \
                 --version prints its version",
                supervision::PROGRAM
            );
            ExitCode::from(2)
        }
    }
}
