//! A fake `sandbox-exec` for running relay's Seatbelt launch path on Linux. See
//! `relay_fakes::sandbox_exec`.

fn main() {
    relay_fakes::sandbox_exec::run()
}
