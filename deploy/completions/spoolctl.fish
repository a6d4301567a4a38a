# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_spoolctl_global_optspecs
    string join \n server= json token-file= h/help V/version
end

function __fish_spoolctl_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_spoolctl_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_spoolctl_using_subcommand
    set -l cmd (__fish_spoolctl_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c spoolctl -n "__fish_spoolctl_needs_command" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_needs_command" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_needs_command" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -s V -l version -d 'Print version'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "send" -d 'Persist and enqueue an HTTP delivery'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "list" -d 'List deliveries, newest first (oldest first for --status pending|in_flight)'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "get" -d 'Inspect one delivery'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "attempts" -d 'Show the attempt history of a delivery'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "transitions" -d 'Show every status change of a delivery, with its reason'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "retry" -d 'Start a new retry cycle for failed deliveries: by ID, or every one a filter matches'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "cancel" -d 'Cancel pending or in-flight delivery work: by ID, or every one a filter matches'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "export" -d 'Write deliveries with their history as JSON lines, to move or back up the queue'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "import" -d 'Read deliveries written by `spoolctl export` (or a spoold v0.1.0 journal) into spoold'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "resolve" -d 'Settle an at-most-once delivery whose outcome is unknown or in manual review'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "checks" -d 'Show the reconciliation checks of an at-most-once delivery'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "stats" -d 'How the spool is doing: counts by status, the oldest due delivery, recent results'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "targets" -d 'Targets with work waiting, recent failures or a pause, in origin order'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "maildrop" -d 'The daemon\'s maildrop: where it is, the drops waiting, and those it refused, with why'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "wait" -d 'Wait until a delivery is succeeded, failed or canceled'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "receive" -d 'Run a small HTTP receiver that prints every request it gets (for trying spoold out)'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "verify" -d 'Check the Standard Webhooks signature of a request a receiver got'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "task" -d 'Run and manage ops tasks: the task types declared in spoold\'s configuration'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "locks" -d 'Show the resource locks tasks hold, and the tasks waiting for each'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "step" -d 'Inside a task\'s script: report a step done, or ask whether it is'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "version" -d 'Print version information'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "completion" -d 'Print a shell completion script to stdout'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "man" -d 'Print the manual page (roff) to stdout'
complete -c spoolctl -n "__fish_spoolctl_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -s X -l method -d 'HTTP method of the delivery' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -s H -l header -d 'Add a header to the delivery, as \'Name: value\' (repeatable)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -s d -l data -d 'JSON body, inline, sent byte for byte; or, as curl takes it, @FILE for the JSON in FILE (@- for stdin)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l data-file -d 'JSON body read from FILE, or from stdin with \'-\'' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l data-binary -d 'Raw body bytes read from FILE, or from stdin with \'-\' (sent as bodyBase64)' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l idempotency-key -d 'Reusing a key with the same request returns the existing delivery' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l max-attempts -d 'Attempts per retry cycle (spoold\'s default when absent)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l not-before -d 'Make no attempt before this time: RFC 3339 (2026-07-18T12:00:00Z) or a duration from now (10m, 1d)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l expires-in -d 'Fail the delivery as expired if no attempt has started within DURATION (e.g. 10m)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l expires-at -d 'Fail the delivery as expired if no attempt has started by TIME (RFC 3339): the same deadline on every run, so a job run again with the same --idempotency-key repeats its request (--expires-in counts from each run)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l remote-id-pointer -d 'JSON pointer to the target\'s id in a 2xx response body (e.g. /id), kept as its remote id' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l sign -d 'Sign every attempt (Standard Webhooks) with the daemon\'s [secrets] entry NAME, in place of its [[targets]] rule\'s' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l fingerprint -d 'The business key the target can be searched by (default: the idempotency key)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l reconcile-url -d 'URL that asks the target whether an unknown request arrived' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l reconcile-method -d 'HTTP method of the reconcile query (default: GET)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l reconcile-header -d 'Add a header to the reconcile query, as \'Name: value\' (repeatable)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l matches-pointer -d 'JSON pointer to the array of matches in the answer (default: the answer is the array)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l reconcile-id-pointer -d 'JSON pointer to the target\'s id inside one match (default: /id)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l observation-window -d 'How long an unknown outcome is checked before it goes to manual review (default: 1h)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l timeout -d 'With --wait: give up after DURATION (exit 5) [default: 30s]' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l interval -d 'With --wait: time between polls [default: 200ms]' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l maildrop -d 'Where to drop the request when spoold cannot be reached; `off`: never [default: where the daemon said at its start, else /var/lib/spoold/maildrop]' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l at-most-once -d 'Never send the request again once it may have reached the target'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l wait -d 'After queuing, wait until the delivery is terminal and exit like `wait` (at most 30s)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand send" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand list" -l status -d 'Only deliveries with this status' -r -f -a "pending\t''
in_flight\t''
succeeded\t''
failed\t''
canceled\t''
unknown\t''
manual_review\t''"
complete -c spoolctl -n "__fish_spoolctl_using_subcommand list" -l target -d 'Only deliveries to this target: an origin (scheme://host[:port]), or a URL with a path (its deliveries, whatever their query)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand list" -l since -d 'Only deliveries created since: a duration ago (24h, 7d) or an RFC 3339 time' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand list" -l limit -d 'Entries per page' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand list" -l cursor -d 'Start at this page (the cursor `more:` gave after an earlier one)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand list" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand list" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand list" -l oldest-first -d 'Oldest first [default: newest first, but oldest first for --status pending|in_flight, the order they are sent in]'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand list" -l newest-first -d 'Newest first, whatever --status'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand list" -l all -d 'Follow next-page cursors until everything has been listed'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand list" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand get" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand get" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand get" -l reveal -d 'Show the values of sensitive headers instead of masking them'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand get" -l body -d 'Print only the body, whole and byte for byte as it is sent (binary bodies decoded)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand get" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand get" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand attempts" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand attempts" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand attempts" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand attempts" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand transitions" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand transitions" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand transitions" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand transitions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand retry" -l status -d 'Only deliveries with this status' -r -f -a "pending\t''
in_flight\t''
succeeded\t''
failed\t''
canceled\t''
unknown\t''
manual_review\t''"
complete -c spoolctl -n "__fish_spoolctl_using_subcommand retry" -l target -d 'Only deliveries to this target: an origin (scheme://host[:port]), or a URL with a path (its deliveries, whatever their query)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand retry" -l since -d 'Only deliveries created since: a duration ago (24h, 7d) or an RFC 3339 time' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand retry" -l until -d 'Only deliveries created before: a duration ago (1h) or an RFC 3339 time' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand retry" -l error-code -d 'Only deliveries whose last attempt ended with this error code (connect_failed, …)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand retry" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand retry" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand retry" -l dry-run -d 'With a filter: only count what would change'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand retry" -s y -l yes -d 'With a filter: act without asking (needed when stdin is not a terminal)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand retry" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand retry" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand cancel" -l status -d 'Only deliveries with this status' -r -f -a "pending\t''
in_flight\t''
succeeded\t''
failed\t''
canceled\t''
unknown\t''
manual_review\t''"
complete -c spoolctl -n "__fish_spoolctl_using_subcommand cancel" -l target -d 'Only deliveries to this target: an origin (scheme://host[:port]), or a URL with a path (its deliveries, whatever their query)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand cancel" -l since -d 'Only deliveries created since: a duration ago (24h, 7d) or an RFC 3339 time' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand cancel" -l until -d 'Only deliveries created before: a duration ago (1h) or an RFC 3339 time' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand cancel" -l error-code -d 'Only deliveries whose last attempt ended with this error code (connect_failed, …)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand cancel" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand cancel" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand cancel" -l dry-run -d 'With a filter: only count what would change'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand cancel" -s y -l yes -d 'With a filter: act without asking (needed when stdin is not a terminal)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand cancel" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand cancel" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand export" -l status -d 'Only deliveries with this status' -r -f -a "pending\t''
in_flight\t''
succeeded\t''
failed\t''
canceled\t''
unknown\t''
manual_review\t''"
complete -c spoolctl -n "__fish_spoolctl_using_subcommand export" -l target -d 'Only deliveries to this target: an origin (scheme://host[:port]), or a URL with a path (its deliveries, whatever their query)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand export" -l since -d 'Only deliveries created since: a duration ago (24h, 7d) or an RFC 3339 time' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand export" -l until -d 'Only deliveries created before: a duration ago (1h) or an RFC 3339 time' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand export" -l error-code -d 'Only deliveries whose last attempt ended with this error code (connect_failed, …)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand export" -s o -l output -d 'Write to FILE (created, not readable by others) instead of standard output' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand export" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand export" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand export" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand export" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand import" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand import" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand import" -l spoold-journal -d 'FILE is a spoold v0.1.0 journal: its pending and in-flight deliveries are imported, and its finished ones for the rest of v0.1.0\'s retention (168h), for their idempotency keys'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand import" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand import" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand resolve" -l remote-id -d 'With --succeeded: the target\'s id for what it created' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand resolve" -l note -d 'Why: kept in the transition log' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand resolve" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand resolve" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand resolve" -l succeeded -d 'It arrived: the delivery succeeded'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand resolve" -l failed -d 'It did not arrive, and must not be sent: the delivery failed'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand resolve" -l resend -d 'Send it again, as a new cycle'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand resolve" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand resolve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand checks" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand checks" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand checks" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand checks" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand stats" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand stats" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand stats" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand stats" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and not __fish_seen_subcommand_from pause resume help" -l limit -d 'Entries per page' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and not __fish_seen_subcommand_from pause resume help" -l cursor -d 'Start at this page (the cursor `more:` gave after an earlier one)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and not __fish_seen_subcommand_from pause resume help" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and not __fish_seen_subcommand_from pause resume help" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and not __fish_seen_subcommand_from pause resume help" -l all -d 'Follow next-page cursors until everything has been listed'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and not __fish_seen_subcommand_from pause resume help" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and not __fish_seen_subcommand_from pause resume help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and not __fish_seen_subcommand_from pause resume help" -f -a "pause" -d 'Send nothing to a target until it is resumed: its deliveries wait, uncharged (on the daemon\'s host; not kept across a restart)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and not __fish_seen_subcommand_from pause resume help" -f -a "resume" -d 'Send to a target again. An origin: lifts a pause by hand, an open breaker, a pause for refused connections, and the 410 Gone of each of its URLs. A URL with a path: lifts only that URL\'s 410 Gone'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and not __fish_seen_subcommand_from pause resume help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and __fish_seen_subcommand_from pause" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and __fish_seen_subcommand_from pause" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and __fish_seen_subcommand_from pause" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and __fish_seen_subcommand_from pause" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and __fish_seen_subcommand_from resume" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and __fish_seen_subcommand_from resume" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and __fish_seen_subcommand_from resume" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and __fish_seen_subcommand_from resume" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and __fish_seen_subcommand_from help" -f -a "pause" -d 'Send nothing to a target until it is resumed: its deliveries wait, uncharged (on the daemon\'s host; not kept across a restart)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and __fish_seen_subcommand_from help" -f -a "resume" -d 'Send to a target again. An origin: lifts a pause by hand, an open breaker, a pause for refused connections, and the 410 Gone of each of its URLs. A URL with a path: lifts only that URL\'s 410 Gone'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand targets; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand maildrop" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand maildrop" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand maildrop" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand maildrop" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand wait" -l timeout -d 'Give up after DURATION (exit 5)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand wait" -l interval -d 'Time between polls' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand wait" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand wait" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand wait" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand wait" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand receive" -l listen -d 'Where to listen (ADDR:PORT; port 0 picks a free one, printed at start)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand receive" -l fail -d 'Answer the first N requests with --fail-status instead' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand receive" -l fail-status -d 'The status of the failing answers' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand receive" -l status -d 'The status of every other answer' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand receive" -l delay -d 'Wait this long before each answer (e.g. 2s)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand receive" -l secret-file -d 'Check every request\'s Standard Webhooks signature with these keys (whsec_…): a request whose signature is missing, wrong or older than 5 minutes is answered 401' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand receive" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand receive" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand receive" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand receive" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand verify" -l secret-file -d 'The secret: one or more whsec_… keys (one per line, or separated by spaces)' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand verify" -l tolerance -d 'Refuse a timestamp further than this from now (or --at); 0 does not check it' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand verify" -l at -d 'Check as of this time (Unix seconds or RFC 3339) instead of now, e.g. for a logged request' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand verify" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand verify" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand verify" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand verify" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -f -a "submit" -d 'Run a declared task type with parameters'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -f -a "list" -d 'List tasks, oldest first'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -f -a "get" -d 'Inspect one task: its fields, parameters, result and error'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -f -a "attempts" -d 'Show the attempts of a task: exit code, signal, duration, error'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -f -a "transitions" -d 'Show every status change of a task, with its reason'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -f -a "steps" -d 'Show the steps a task\'s script reported done: name, attempt, time'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -f -a "logs" -d 'Print what an attempt of a task wrote to stdout and stderr'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -f -a "cancel" -d 'Cancel a pending task, or stop a running one'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -f -a "retry" -d 'Run a task that ended (failed, timed out, interrupted, manual review) again'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -f -a "resolve" -d 'Settle a task in manual review: it succeeded after all, or it failed'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -f -a "types" -d 'List the declared task types'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -f -a "wait" -d 'Wait until a task is in a final status'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and not __fish_seen_subcommand_from submit list get attempts transitions steps logs cancel retry resolve types wait help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from submit" -s p -l param -d 'A parameter of the type, as KEY=VALUE (repeatable; split at the first \'=\')' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from submit" -l idempotency-key -d 'Reusing a key with the same parameters returns the existing task' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from submit" -l not-before -d 'Start no attempt before this time: RFC 3339 (2026-07-18T12:00:00Z) or a duration from now (10m, 1d)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from submit" -l timeout -d 'With --wait or --follow: give up after DURATION (exit 5)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from submit" -l interval -d 'With --wait or --follow: time between polls of the task [default: 200ms]' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from submit" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from submit" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from submit" -l wait -d 'After submitting, wait until the task is in a final status and exit like `task wait`'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from submit" -l follow -d 'After submitting, print each attempt\'s output as it runs, then exit like --wait'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from submit" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from submit" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from list" -l status -d 'Only tasks with this status' -r -f -a "pending\t''
running\t''
succeeded\t''
failed\t''
timed_out\t''
interrupted\t''
canceled\t''
manual_review\t''"
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from list" -l type -d 'Only tasks of this type' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from list" -l limit -d 'Entries per page' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from list" -l cursor -d 'Start at this page (the cursor `more:` gave after an earlier one)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from list" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from list" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from list" -l all -d 'Follow next-page cursors until everything has been listed'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from list" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from get" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from get" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from get" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from get" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from attempts" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from attempts" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from attempts" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from attempts" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from transitions" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from transitions" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from transitions" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from transitions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from steps" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from steps" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from steps" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from steps" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from logs" -l attempt -d 'The attempt whose output to print (default: the latest)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from logs" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from logs" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from logs" -s f -l follow -d 'Keep printing while the attempt runs; stop when it ends'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from logs" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from logs" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from cancel" -l type -d 'Only tasks of this type' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from cancel" -l status -d 'Only tasks with this status' -r -f -a "pending\t''
running\t''
succeeded\t''
failed\t''
timed_out\t''
interrupted\t''
canceled\t''
manual_review\t''"
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from cancel" -l since -d 'Only tasks created since: a duration ago (24h, 7d) or an RFC 3339 time' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from cancel" -l until -d 'Only tasks created before: a duration ago (1h) or an RFC 3339 time' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from cancel" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from cancel" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from cancel" -l dry-run -d 'With a filter: only count what would change'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from cancel" -s y -l yes -d 'With a filter: act without asking (needed when stdin is not a terminal)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from cancel" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from cancel" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from retry" -l type -d 'Only tasks of this type' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from retry" -l status -d 'Only tasks with this status' -r -f -a "pending\t''
running\t''
succeeded\t''
failed\t''
timed_out\t''
interrupted\t''
canceled\t''
manual_review\t''"
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from retry" -l since -d 'Only tasks created since: a duration ago (24h, 7d) or an RFC 3339 time' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from retry" -l until -d 'Only tasks created before: a duration ago (1h) or an RFC 3339 time' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from retry" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from retry" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from retry" -l dry-run -d 'With a filter: only count what would change'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from retry" -s y -l yes -d 'With a filter: act without asking (needed when stdin is not a terminal)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from retry" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from retry" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from resolve" -l note -d 'Why: kept in the transition log' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from resolve" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from resolve" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from resolve" -l succeeded -d 'The work was done: the task succeeded'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from resolve" -l failed -d 'It was not: the task failed (and is not run again by itself)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from resolve" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from resolve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from types" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from types" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from types" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from types" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from wait" -l timeout -d 'Give up after DURATION (exit 5)' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from wait" -l interval -d 'Time between polls' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from wait" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from wait" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from wait" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from wait" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from help" -f -a "submit" -d 'Run a declared task type with parameters'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from help" -f -a "list" -d 'List tasks, oldest first'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from help" -f -a "get" -d 'Inspect one task: its fields, parameters, result and error'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from help" -f -a "attempts" -d 'Show the attempts of a task: exit code, signal, duration, error'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from help" -f -a "transitions" -d 'Show every status change of a task, with its reason'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from help" -f -a "steps" -d 'Show the steps a task\'s script reported done: name, attempt, time'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from help" -f -a "logs" -d 'Print what an attempt of a task wrote to stdout and stderr'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from help" -f -a "cancel" -d 'Cancel a pending task, or stop a running one'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from help" -f -a "retry" -d 'Run a task that ended (failed, timed out, interrupted, manual review) again'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from help" -f -a "resolve" -d 'Settle a task in manual review: it succeeded after all, or it failed'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from help" -f -a "types" -d 'List the declared task types'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from help" -f -a "wait" -d 'Wait until a task is in a final status'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand task; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand locks" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand locks" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand locks" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand locks" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and not __fish_seen_subcommand_from done check help" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and not __fish_seen_subcommand_from done check help" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and not __fish_seen_subcommand_from done check help" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and not __fish_seen_subcommand_from done check help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and not __fish_seen_subcommand_from done check help" -f -a "done" -d 'Record a step of this task as done by this attempt (prints nothing; --json the record)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and not __fish_seen_subcommand_from done check help" -f -a "check" -d 'Exit 0 if a step of this task is done (by any attempt), 1 if not'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and not __fish_seen_subcommand_from done check help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and __fish_seen_subcommand_from done" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and __fish_seen_subcommand_from done" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and __fish_seen_subcommand_from done" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and __fish_seen_subcommand_from done" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and __fish_seen_subcommand_from check" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and __fish_seen_subcommand_from check" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and __fish_seen_subcommand_from check" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and __fish_seen_subcommand_from check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and __fish_seen_subcommand_from help" -f -a "done" -d 'Record a step of this task as done by this attempt (prints nothing; --json the record)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and __fish_seen_subcommand_from help" -f -a "check" -d 'Exit 0 if a step of this task is done (by any attempt), 1 if not'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand step; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand version" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand version" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand version" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand version" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand completion" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand completion" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand completion" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand completion" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand man" -l server -d 'spoold\'s API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock' -r
complete -c spoolctl -n "__fish_spoolctl_using_subcommand man" -l token-file -d 'Read a bearer token from FILE and send it on every request' -r -F
complete -c spoolctl -n "__fish_spoolctl_using_subcommand man" -l json -d 'Print the API\'s JSON (one compact line) instead of a table'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand man" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "send" -d 'Persist and enqueue an HTTP delivery'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "list" -d 'List deliveries, newest first (oldest first for --status pending|in_flight)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "get" -d 'Inspect one delivery'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "attempts" -d 'Show the attempt history of a delivery'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "transitions" -d 'Show every status change of a delivery, with its reason'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "retry" -d 'Start a new retry cycle for failed deliveries: by ID, or every one a filter matches'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "cancel" -d 'Cancel pending or in-flight delivery work: by ID, or every one a filter matches'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "export" -d 'Write deliveries with their history as JSON lines, to move or back up the queue'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "import" -d 'Read deliveries written by `spoolctl export` (or a spoold v0.1.0 journal) into spoold'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "resolve" -d 'Settle an at-most-once delivery whose outcome is unknown or in manual review'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "checks" -d 'Show the reconciliation checks of an at-most-once delivery'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "stats" -d 'How the spool is doing: counts by status, the oldest due delivery, recent results'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "targets" -d 'Targets with work waiting, recent failures or a pause, in origin order'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "maildrop" -d 'The daemon\'s maildrop: where it is, the drops waiting, and those it refused, with why'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "wait" -d 'Wait until a delivery is succeeded, failed or canceled'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "receive" -d 'Run a small HTTP receiver that prints every request it gets (for trying spoold out)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "verify" -d 'Check the Standard Webhooks signature of a request a receiver got'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "task" -d 'Run and manage ops tasks: the task types declared in spoold\'s configuration'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "locks" -d 'Show the resource locks tasks hold, and the tasks waiting for each'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "step" -d 'Inside a task\'s script: report a step done, or ask whether it is'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "version" -d 'Print version information'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "completion" -d 'Print a shell completion script to stdout'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "man" -d 'Print the manual page (roff) to stdout'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and not __fish_seen_subcommand_from send list get attempts transitions retry cancel export import resolve checks stats targets maildrop wait receive verify task locks step version completion man help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from targets" -f -a "pause" -d 'Send nothing to a target until it is resumed: its deliveries wait, uncharged (on the daemon\'s host; not kept across a restart)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from targets" -f -a "resume" -d 'Send to a target again. An origin: lifts a pause by hand, an open breaker, a pause for refused connections, and the 410 Gone of each of its URLs. A URL with a path: lifts only that URL\'s 410 Gone'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from task" -f -a "submit" -d 'Run a declared task type with parameters'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from task" -f -a "list" -d 'List tasks, oldest first'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from task" -f -a "get" -d 'Inspect one task: its fields, parameters, result and error'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from task" -f -a "attempts" -d 'Show the attempts of a task: exit code, signal, duration, error'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from task" -f -a "transitions" -d 'Show every status change of a task, with its reason'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from task" -f -a "steps" -d 'Show the steps a task\'s script reported done: name, attempt, time'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from task" -f -a "logs" -d 'Print what an attempt of a task wrote to stdout and stderr'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from task" -f -a "cancel" -d 'Cancel a pending task, or stop a running one'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from task" -f -a "retry" -d 'Run a task that ended (failed, timed out, interrupted, manual review) again'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from task" -f -a "resolve" -d 'Settle a task in manual review: it succeeded after all, or it failed'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from task" -f -a "types" -d 'List the declared task types'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from task" -f -a "wait" -d 'Wait until a task is in a final status'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from step" -f -a "done" -d 'Record a step of this task as done by this attempt (prints nothing; --json the record)'
complete -c spoolctl -n "__fish_spoolctl_using_subcommand help; and __fish_seen_subcommand_from step" -f -a "check" -d 'Exit 0 if a step of this task is done (by any attempt), 1 if not'
