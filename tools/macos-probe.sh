#!/bin/sh
# relay's Mac probe (issue 24 item 5, docs/macos.md): run it INSIDE a relay session on a
# Mac. It tries each way out of a same-uid Seatbelt sandbox and prints one line each,
# `OPEN <what>` (the way out worked: a break of relay's promise) or `closed <what>`; then
# each capability Claude Code and the usual tools need, `ok <what>` or `BROKEN <what>`;
# `skip <what> (<why>)` where there is nothing to try. The last line is
# `probe: <n> OPEN, <n> BROKEN`, and the exit status is 1 when either is not 0.
#
# Nothing it opens is kept: the bundle, the launchd job and the preference it writes
# are removed again when they got through. `kill -0` only asks whether a signal would
# be delivered. The keychain is asked about an item's existence, never for its secret.
#
# Variables (all optional):
#   RELAY_PROBE_PID     a process outside the session to signal and inspect (the
#                       daemon's pid; `pgrep -x relay` outside the session)
#   RELAY_PROBE_CLAUDE  the Claude Code to run as `claude -p` (default: `claude`);
#                       tried only when fd 5 is open (the token relay hands a Claude
#                       launch), so run the probe as the claude-code template's program;
#                       `skip` skips it
#   RELAY_PROBE_SKIP_NET=1  skip the network checks (offline)

open_n=0
broken_n=0
scratch=${TMPDIR:-/tmp}/relay-probe.$$
mkdir -p "$scratch" || exit 2
trap 'rm -rf "$scratch"' EXIT

# escape WHAT CMD...: OPEN when CMD exits 0.
escape() {
    what=$1
    shift
    if "$@" >"$scratch/out" 2>&1; then
        echo "OPEN $what"
        open_n=$((open_n + 1))
    else
        echo "closed $what"
    fi
}

# need WHAT CMD...: ok when CMD exits 0, else BROKEN with its last line.
need() {
    what=$1
    shift
    if "$@" >"$scratch/out" 2>&1; then
        echo "ok $what"
    else
        echo "BROKEN $what: $(tail -n 1 "$scratch/out")"
        broken_n=$((broken_n + 1))
    fi
}

skip() {
    echo "skip $1 ($2)"
}

have() {
    command -v "$1" >/dev/null 2>&1
}

# --- the ways out ------------------------------------------------------------------

# A bundle the session wrote, opened through LaunchServices: launchd would start it
# outside the sandbox. Its program writes a marker; either the marker or `open`'s
# success is an escape.
bundle_opens() {
    app=$scratch/RelayProbe.app
    mkdir -p "$app/Contents/MacOS" || return 1
    cat >"$app/Contents/Info.plist" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<plist version="1.0"><dict>
<key>CFBundleExecutable</key><string>probe</string>
<key>CFBundleIdentifier</key><string>relay.probe.$$</string>
<key>CFBundlePackageType</key><string>APPL</string>
</dict></plist>
EOF
    printf '#!/bin/sh\n: > %s/opened\n' "$scratch" >"$app/Contents/MacOS/probe"
    chmod +x "$app/Contents/MacOS/probe"
    rc=1
    /usr/bin/open -g "$app" && rc=0
    sleep 2
    [ -e "$scratch/opened" ] && rc=0
    return $rc
}
escape "open a bundle the session wrote (LaunchServices)" bundle_opens
escape "open -a Terminal" /usr/bin/open -g -j -a Terminal
escape "osascript: an Apple Event to Finder" \
    /usr/bin/osascript -e 'tell application "Finder" to get name'

launchd_job() {
    label=relay.probe.$$
    /bin/launchctl submit -l "$label" -- /usr/bin/true || return 1
    /bin/launchctl remove "$label" 2>/dev/null
    return 0
}
escape "launchctl submit a job" launchd_job
escape "pbpaste (the clipboard)" /usr/bin/pbpaste

# Reaching the keychain at all is the escape: "could not be found" means it answered.
keychain() {
    /usr/bin/security find-generic-password -s "Claude Code-credentials" >"$scratch/kc" 2>&1 && return 0
    grep -q "could not be found" "$scratch/kc"
}
escape "security find-generic-password (the keychain)" keychain

if [ -n "$RELAY_PROBE_PID" ]; then
    escape "kill -0 the daemon (pid $RELAY_PROBE_PID)" kill -0 "$RELAY_PROBE_PID"
    other_args() {
        out=$(ps -o args= -p "$RELAY_PROBE_PID" 2>/dev/null) && [ -n "$out" ]
    }
    escape "ps -o args of the daemon (another process's arguments)" other_args
else
    skip "kill the daemon" "RELAY_PROBE_PID unset"
    skip "another process's arguments" "RELAY_PROBE_PID unset"
fi

own_tty=$(tty 2>/dev/null)
other_tty=
for t in /dev/ttys[0-9]*; do
    [ -c "$t" ] && [ "$t" != "$own_tty" ] && other_tty=$t && break
done
if [ -n "$other_tty" ]; then
    escape "open another terminal ($other_tty)" sh -c ': < "$1"' sh "$other_tty"
else
    skip "another terminal" "no other /dev/ttys* is listed"
fi

connects() {
    [ -S "$1" ] || return 1
    nc -U "$1" </dev/null >/dev/null 2>&1
}
docker_tried=
for sock in "$HOME/.docker/run/docker.sock" /var/run/docker.sock "$HOME/.colima/default/docker.sock" "$HOME/.orbstack/run/docker.sock"; do
    if [ -S "$sock" ]; then
        escape "connect to Docker's socket $sock" connects "$sock"
        docker_tried=1
    fi
done
[ -n "$docker_tried" ] || skip "Docker's socket" "none on this Mac"
agent_tried=
for sock in "$SSH_AUTH_SOCK" /private/tmp/com.apple.launchd.*/Listeners; do
    if [ -n "$sock" ] && [ -S "$sock" ]; then
        escape "connect to the ssh-agent socket $sock" connects "$sock"
        agent_tried=1
    fi
done
[ -n "$agent_tried" ] || skip "the ssh-agent socket" "none listed from inside"

prefs_write() {
    key=relay-probe-$$
    /usr/bin/defaults write com.apple.Terminal "$key" -string x || return 1
    /usr/bin/defaults delete com.apple.Terminal "$key" 2>/dev/null
    return 0
}
escape "defaults write another app's domain (com.apple.Terminal)" prefs_write

# --- what the session needs --------------------------------------------------------

if [ "$RELAY_PROBE_SKIP_NET" = 1 ]; then
    skip "the network checks" "RELAY_PROBE_SKIP_NET=1"
else
    need "DNS and TLS with curl" curl -sS -o /dev/null --max-time 30 https://api.anthropic.com/
    if have node; then
        need "DNS and TLS with node" node -e 'fetch("https://api.anthropic.com/").then(() => process.exit(0), e => { console.error(String(e.cause || e)); process.exit(1) })'
    else
        skip "DNS and TLS with node" "no node on PATH"
    fi
    need "git ls-remote over https" git ls-remote https://github.com/git/git HEAD
fi
need "a pty (script(1))" script -q /dev/null /bin/echo pty
if have python3; then
    need "a python semaphore (multiprocessing.Lock)" python3 -c 'import multiprocessing as m; l = m.Lock(); l.acquire(); l.release()'
else
    skip "a python semaphore" "no python3 on PATH"
fi
if [ "$RELAY_PROBE_CLAUDE" = skip ]; then
    skip "claude -p through fd 5" "RELAY_PROBE_CLAUDE=skip"
elif [ -e /dev/fd/5 ]; then
    claude_p() {
        out=$(CLAUDE_CODE_OAUTH_TOKEN_FILE_DESCRIPTOR=5 "${RELAY_PROBE_CLAUDE:-claude}" -p 'Reply with the single word ok.' </dev/null 2>&1)
        echo "$out"
        echo "$out" | grep -qi ok
    }
    need "claude -p with the token on fd 5" claude_p
else
    skip "claude -p through fd 5" "fd 5 is not open: run the probe as the claude-code template's program"
fi

echo "probe: $open_n OPEN, $broken_n BROKEN"
[ "$open_n" = 0 ] && [ "$broken_n" = 0 ]
