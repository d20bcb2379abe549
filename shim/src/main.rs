//! `relay-shim exec …`: see the library for the steps.

fn main() {
    relay_shim::run()
}
