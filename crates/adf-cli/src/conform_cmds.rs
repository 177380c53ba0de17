//! `adf conform`: parses the kit's arguments and prints its report; the checks live in
//! `adf-conform`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};

use crate::output::Output;

/// Report format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// A summary by section.
    Human,
    /// The stable JSON document (docs/conformance.md); `--json` selects it too.
    Json,
    /// JUnit XML for CI systems.
    Junit,
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Report format (`--json` is the same as `--format json`).
    #[arg(long, value_enum, default_value = "human")]
    format: Format,
    /// Also write the report (in the chosen format) to this file.
    #[arg(long, value_name = "PATH")]
    output: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConformCommand {
    /// Judge an .adf file from its bytes (schema, tables, meta, config, files, identity,
    /// audit); the file is opened immutable and never changed.
    File {
        /// The .adf file, written by any runtime.
        file: PathBuf,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// Judge a live daemon's API (status codes, JSON shapes, SSE framing, error shapes); it
    /// loads, uses and unloads a scratch agent of its own and touches no other agent.
    Daemon {
        /// The daemon's base URL, e.g. http://127.0.0.1:7411.
        url: String,
        /// The daemon's API token (the daemon-token file of its runtime home).
        #[arg(long, env = "ADF_DAEMON_TOKEN", hide_env_values = true)]
        token: Option<String>,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// Judge a mesh peer as another agent would (not supported yet).
    Mesh {
        /// The peer runtime's mesh base URL.
        url: String,
        #[command(flatten)]
        report: ReportArgs,
    },
}

pub(crate) fn run(command: ConformCommand, out: Output) -> Result<ExitCode> {
    let (report, args) = match command {
        ConformCommand::File { file, report } => (adf_conform::file::check_file(&file)?, report),
        ConformCommand::Daemon { url, token, report } => (
            adf_conform::daemon::check_daemon(&url, token.as_deref())?,
            report,
        ),
        ConformCommand::Mesh { url, report } => (adf_conform::mesh::check_mesh(&url)?, report),
    };
    let format = if out.json { Format::Json } else { args.format };
    let text = match format {
        Format::Human => report.to_human(),
        Format::Json => format!("{:#}\n", report.to_json()),
        Format::Junit => report.to_junit(),
    };
    print!("{text}");
    if let Some(path) = args.output {
        std::fs::write(&path, &text)?;
    }
    Ok(if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
