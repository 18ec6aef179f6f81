//! The `capstan` binary: parse the command line and dispatch. Everything else lives in the library.

use clap::Parser;

// Rendering allocates many small values; mimalloc is markedly faster at that than glibc's malloc.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    capstan_harness::install_crypto_provider();
    let cli = capstan::cli::Cli::parse();
    match capstan::cmd::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
