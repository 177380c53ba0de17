//! Which module runs each command that acts on a file directly (no daemon involved): the
//! runtime commands (`chat`, `tool`, `run`, `code`, approvals, `demo`), the identity commands,
//! and the owner's file commands in `file_cmds`.

use std::process::ExitCode;

use anyhow::Result;

use crate::Command;
use crate::chat_cmds::{ChatApprovals, ChatOptions};
use crate::code_cmds::Job;
use crate::file_cmds as file;
use crate::output::Output;
use crate::tool_cmds::ApprovalPolicy;

/// Runs one file command and returns the process exit code.
pub(crate) fn run(command: Command, out: Output) -> Result<ExitCode> {
    let changed = changed_file(&command).map(std::path::Path::to_path_buf);
    let code = run_command(command, out)?;
    if let Some(file) = changed
        && code == ExitCode::SUCCESS
    {
        crate::held::note_if_held(&file);
    }
    Ok(code)
}

/// The file a command writes as the owner, outside any daemon: a daemon that holds it picks
/// the change up by itself, and the command says so ([`crate::held`]).
fn changed_file(command: &Command) -> Option<&std::path::Path> {
    use crate::{ConfigCommand, MetaCommand};
    match command {
        Command::Put { file, .. }
        | Command::Rm { file, .. }
        | Command::Authorize { file, .. }
        | Command::Unauthorize { file, .. }
        | Command::Tool { file, .. }
        | Command::Meta(MetaCommand::Set { file, .. } | MetaCommand::Rm { file, .. })
        | Command::Config(ConfigCommand::Set { file, .. }) => Some(file),
        _ => None,
    }
}

fn run_command(command: Command, out: Output) -> Result<ExitCode> {
    match command {
        Command::Demo {
            dir,
            provider_url: url,
            model,
        } => crate::demo::run(dir, crate::demo::ProviderChoice { url, model }, out),
        Command::Tool {
            file,
            name,
            args,
            call_as,
            approve_all,
            deny_all,
        } => {
            let policy = approval_policy(approve_all, deny_all);
            crate::tool_cmds::tool(&file, &name, args.as_deref(), call_as, policy, out)
        }
        Command::Chat {
            file,
            message,
            loop_name,
            approve_all,
            deny_all,
            answer,
        } => {
            let approvals = chat_approvals(approve_all, deny_all);
            let options = ChatOptions {
                message,
                loop_name,
                approvals,
                answer,
            };
            crate::chat_cmds::run(&file, options, out)
        }
        Command::Approve { file, task } => crate::tool_cmds::resolve(&file, &task, true, None, out),
        Command::Deny { file, task, reason } => {
            crate::tool_cmds::resolve(&file, &task, false, reason, out)
        }
        Command::Run {
            file,
            lambda: source,
            args,
            timeout,
        } => crate::code_cmds::run(&file, Job::Lambda { source, args }, timeout, out),
        Command::Code {
            file,
            code,
            ts: typescript,
            timeout,
        } => crate::code_cmds::run(&file, Job::Inline { code, typescript }, timeout, out),
        command @ (Command::Owner(_) | Command::Identity(_) | Command::Claim { .. }) => {
            crate::identity_cmds::run(command, out)
        }
        Command::Mcp(command) => crate::mcp_cmds::run(*command, out),
        Command::Packages { file, action } => crate::package_cmds::run(&file, action, out),
        Command::New {
            file,
            name,
            description,
            handle,
        } => file::new(&file, name, description, handle, out),
        Command::Info { file } => file::info(&file, out),
        Command::Check { file } => file::check(&file, out),
        Command::Conform(command) => crate::conform_cmds::run(command, out),
        Command::Migrate { file } => file::migrate(&file, out),
        Command::Files { file, prefix } => file::files(&file, prefix.as_deref().unwrap_or(""), out),
        Command::Cat { file, path } => file::cat(&file, &path),
        Command::Put {
            file,
            path,
            source,
            protection,
            mime,
        } => file::put(&file, &path, source.as_deref(), protection, mime, out),
        Command::Rm { file, path, force } => file::rm(&file, &path, force, out),
        Command::Authorize { file, path } => file::set_authorized(&file, &path, true, out),
        Command::Unauthorize { file, path } => file::set_authorized(&file, &path, false, out),
        Command::Meta(command) => file::meta(command, out),
        Command::Config(command) => file::config(command, out),
        Command::Loop {
            file,
            loop_name,
            context,
        } => file::show_loop(&file, &loop_name, context, out),
        Command::Inbox { file, limit } => file::messages(&file, "adf_inbox", limit, out),
        Command::Outbox { file, limit } => file::messages(&file, "adf_outbox", limit, out),
        Command::Timers { file } => file::timers(&file, out),
        Command::Tasks { file, status } => file::tasks(&file, status.as_deref(), out),
        Command::Logs { file, limit } => file::logs(&file, limit, out),
    }
}

/// `--approve-all` wins over `--deny-all`; neither asks on the terminal.
fn approval_policy(approve_all: bool, deny_all: bool) -> ApprovalPolicy {
    match (approve_all, deny_all) {
        (true, _) => ApprovalPolicy::ApproveAll,
        (_, true) => ApprovalPolicy::DenyAll,
        _ => ApprovalPolicy::Ask,
    }
}

/// The same choice as [`approval_policy`], for a chat turn.
fn chat_approvals(approve_all: bool, deny_all: bool) -> ChatApprovals {
    match (approve_all, deny_all) {
        (true, _) => ChatApprovals::ApproveAll,
        (_, true) => ChatApprovals::DenyAll,
        _ => ChatApprovals::Ask,
    }
}
