//! `spoolctl completion <shell>` and `spoolctl man`: a completion script and the manual page,
//! generated from the clap definitions, so they always match the command line.

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;
use crate::commands::Exit;
use crate::output::Output;

pub fn run(shell: Shell, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    // Generated into memory first: clap_complete panics on a failed write (e.g. a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "spoolctl", &mut script);
    out.raw(&script)?;
    Ok(Exit::Success)
}

/// `spoolctl man`: spoolctl(1).
pub fn man(out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut page)?;
    out.raw(&page)?;
    Ok(Exit::Success)
}
