fn main() -> std::process::ExitCode {
    relay::cli::run()
}
