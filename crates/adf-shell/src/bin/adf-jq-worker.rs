//! The jq worker as a program of its own (`adf_shell::worker`): serves one `jq` request from
//! stdin. The `adf` binary serves the same requests itself (`adf __adf-jq-worker`); this one
//! is found beside test binaries and by embedders (`ADF_JQ_WORKER`).

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(adf_shell::worker::serve())
}
