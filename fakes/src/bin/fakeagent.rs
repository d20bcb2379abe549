//! `fakeagent`: a Claude Code stand-in for relay's tests. See `relay_fakes::agent`.

fn main() {
    relay_fakes::agent::run()
}
