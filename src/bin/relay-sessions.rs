fn main() -> std::process::ExitCode {
    relay::host::run()
}
