//! Thin entry point: parse, dispatch, map the outcome to an exit code
//! (0 ok, 1 a check failed, 2 usage or environment error).

fn main() {
    std::process::exit(polykv_forge::cli::main());
}
