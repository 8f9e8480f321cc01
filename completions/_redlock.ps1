
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'redlock' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'redlock'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'redlock' {
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'PEM file with the private key of --tls-cert')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace for every Redis key redlock uses')
            [CompletionResult]::new('--meta-ttl', '--meta-ttl', [CompletionResultType]::ParameterName, 'Keep a lock''s record (fence counter, last holder) for DUR after its last use')
            [CompletionResult]::new('--log-max', '--log-max', [CompletionResultType]::ParameterName, 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting to Redis after DUR')
            [CompletionResult]::new('--io-timeout', '--io-timeout', [CompletionResultType]::ParameterName, 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('exec', 'exec', [CompletionResultType]::ParameterValue, 'Take a lock, run a command while renewing it, release it when the command exits')
            [CompletionResult]::new('acquire', 'acquire', [CompletionResultType]::ParameterValue, 'Take a lock and print its token (the lock stays held after redlock exits)')
            [CompletionResult]::new('release', 'release', [CompletionResultType]::ParameterValue, 'Release a lock held with TOKEN (never someone else''s)')
            [CompletionResult]::new('extend', 'extend', [CompletionResultType]::ParameterValue, 'Reset the TTL of a lock held with TOKEN (an expired lock is never brought back)')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Show who holds locks: the named KEYs, or every lock under the prefix')
            [CompletionResult]::new('log', 'log', [CompletionResultType]::ParameterValue, 'Show a lock''s history: who took it, when, how long they waited and held it, how it ended')
            [CompletionResult]::new('wait', 'wait', [CompletionResultType]::ParameterValue, 'Wait until a lock is free, without taking it or joining its queue')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'redlock;exec' {
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lock lifetime: it frees itself DUR after it was taken or renewed (exec renews every TTL/3)')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Wait at most DUR for a busy lock (default: until it is free; first come, first served)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Wait at most DUR for a busy lock (default: until it is free; first come, first served)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status when the lock is busy (not acquired); 0 makes a skipped cron run succeed')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock is busy (not acquired); 0 makes a skipped cron run succeed')
            [CompletionResult]::new('--note', '--note', [CompletionResultType]::ParameterName, 'Describe the holder in ''redlock status'' (default: the command line); secrets show as ***')
            [CompletionResult]::new('--wait-replicas', '--wait-replicas', [CompletionResultType]::ParameterName, 'After acquiring, wait (up to --io-timeout) until N replicas have the lock, or fail')
            [CompletionResult]::new('--slots', '--slots', [CompletionResultType]::ParameterName, 'Let up to N holders in at once; exec''s command gets its place in REDLOCK_SLOT (0 to N-1)')
            [CompletionResult]::new('--pool', '--pool', [CompletionResultType]::ParameterName, 'One holder per named resource; exec''s command gets the one it holds in REDLOCK_RESOURCE')
            [CompletionResult]::new('--on-lost', '--on-lost', [CompletionResultType]::ParameterName, 'What to do with the command if the lock is lost while it runs')
            [CompletionResult]::new('--kill-after', '--kill-after', [CompletionResultType]::ParameterName, 'SIGKILL the command if it still runs DUR after a SIGTERM or SIGINT (passed on, or sent)')
            [CompletionResult]::new('--max-runtime', '--max-runtime', [CompletionResultType]::ParameterName, 'Stop the command after it held the lock for DUR (SIGTERM, then SIGKILL) and exit 124')
            [CompletionResult]::new('--warn-after', '--warn-after', [CompletionResultType]::ParameterName, 'Warn (stderr, and the lock''s history) once the command has held the lock for DUR')
            [CompletionResult]::new('--report', '--report', [CompletionResultType]::ParameterName, 'When exec ends, append one JSON line about the run to FILE (- for stdout)')
            [CompletionResult]::new('-c', '-c', [CompletionResultType]::ParameterName, 'Run this shell command with /bin/sh -c instead of CMD')
            [CompletionResult]::new('--command', '--command', [CompletionResultType]::ParameterName, 'Run this shell command with /bin/sh -c instead of CMD')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'PEM file with the private key of --tls-cert')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace for every Redis key redlock uses')
            [CompletionResult]::new('--meta-ttl', '--meta-ttl', [CompletionResultType]::ParameterName, 'Keep a lock''s record (fence counter, last holder) for DUR after its last use')
            [CompletionResult]::new('--log-max', '--log-max', [CompletionResultType]::ParameterName, 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting to Redis after DUR')
            [CompletionResult]::new('--io-timeout', '--io-timeout', [CompletionResultType]::ParameterName, 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Do not wait: fail at once if the lock is busy')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Do not wait: fail at once if the lock is busy')
            [CompletionResult]::new('--allow-eviction', '--allow-eviction', [CompletionResultType]::ParameterName, 'Lock even on a server that may evict it: maxmemory-policy allkeys-* (refused without this)')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Hold it shared: any number of --shared holders, or one without (a writer, who goes first)')
            [CompletionResult]::new('--supersede', '--supersede', [CompletionResultType]::ParameterName, 'Make earlier --supersede waiters give up (exit -E); a later one makes this one give up')
            [CompletionResult]::new('--preempt', '--preempt', [CompletionResultType]::ParameterName, 'Go ahead of the waiters without --preempt; stop a --preemptible holder (it exits 75)')
            [CompletionResult]::new('--preemptible', '--preemptible', [CompletionResultType]::ParameterName, 'Once held, a --preempt waiter may stop the command (acquire: needs --while-pid)')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'redlock;acquire' {
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lock lifetime: it frees itself DUR after it was taken or renewed (exec renews every TTL/3)')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Wait at most DUR for a busy lock (default: until it is free; first come, first served)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Wait at most DUR for a busy lock (default: until it is free; first come, first served)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status when the lock is busy (not acquired); 0 makes a skipped cron run succeed')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock is busy (not acquired); 0 makes a skipped cron run succeed')
            [CompletionResult]::new('--note', '--note', [CompletionResultType]::ParameterName, 'Describe the holder in ''redlock status'' (default: the command line); secrets show as ***')
            [CompletionResult]::new('--wait-replicas', '--wait-replicas', [CompletionResultType]::ParameterName, 'After acquiring, wait (up to --io-timeout) until N replicas have the lock, or fail')
            [CompletionResult]::new('--slots', '--slots', [CompletionResultType]::ParameterName, 'Let up to N holders in at once; exec''s command gets its place in REDLOCK_SLOT (0 to N-1)')
            [CompletionResult]::new('--pool', '--pool', [CompletionResultType]::ParameterName, 'One holder per named resource; exec''s command gets the one it holds in REDLOCK_RESOURCE')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'What to print on stdout')
            [CompletionResult]::new('--while-pid', '--while-pid', [CompletionResultType]::ParameterName, 'Keep the lock (renewed every TTL/3) while PID and the work it started run')
            [CompletionResult]::new('--on-lost', '--on-lost', [CompletionResultType]::ParameterName, 'With --while-pid: what the keeper does to PID and its work if the lock is lost or preempted')
            [CompletionResult]::new('--kill-after', '--kill-after', [CompletionResultType]::ParameterName, 'With --while-pid: SIGKILL PID''s work if it still runs DUR after the keeper''s SIGTERM')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'PEM file with the private key of --tls-cert')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace for every Redis key redlock uses')
            [CompletionResult]::new('--meta-ttl', '--meta-ttl', [CompletionResultType]::ParameterName, 'Keep a lock''s record (fence counter, last holder) for DUR after its last use')
            [CompletionResult]::new('--log-max', '--log-max', [CompletionResultType]::ParameterName, 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting to Redis after DUR')
            [CompletionResult]::new('--io-timeout', '--io-timeout', [CompletionResultType]::ParameterName, 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Do not wait: fail at once if the lock is busy')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Do not wait: fail at once if the lock is busy')
            [CompletionResult]::new('--allow-eviction', '--allow-eviction', [CompletionResultType]::ParameterName, 'Lock even on a server that may evict it: maxmemory-policy allkeys-* (refused without this)')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Hold it shared: any number of --shared holders, or one without (a writer, who goes first)')
            [CompletionResult]::new('--supersede', '--supersede', [CompletionResultType]::ParameterName, 'Make earlier --supersede waiters give up (exit -E); a later one makes this one give up')
            [CompletionResult]::new('--preempt', '--preempt', [CompletionResultType]::ParameterName, 'Go ahead of the waiters without --preempt; stop a --preemptible holder (it exits 75)')
            [CompletionResult]::new('--preemptible', '--preemptible', [CompletionResultType]::ParameterName, 'Once held, a --preempt waiter may stop the command (acquire: needs --while-pid)')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'redlock;release' {
            [CompletionResult]::new('--if-fence', '--if-fence', [CompletionResultType]::ParameterName, 'With --force: release only if the lock is still held with fence N, as `status` shows it (exit 3 otherwise)')
            [CompletionResult]::new('--if-token', '--if-token', [CompletionResultType]::ParameterName, 'With --force: release only if the holder''s token starts with FINGERPRINT, the 8 hex digits `status` shows, or more of the token (exit 3 otherwise)')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'PEM file with the private key of --tls-cert')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace for every Redis key redlock uses')
            [CompletionResult]::new('--meta-ttl', '--meta-ttl', [CompletionResultType]::ParameterName, 'Keep a lock''s record (fence counter, last holder) for DUR after its last use')
            [CompletionResult]::new('--log-max', '--log-max', [CompletionResultType]::ParameterName, 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting to Redis after DUR')
            [CompletionResult]::new('--io-timeout', '--io-timeout', [CompletionResultType]::ParameterName, 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Delete the lock whoever holds it, and print the previous holder')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'redlock;extend' {
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'New lifetime, counted from now')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'PEM file with the private key of --tls-cert')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace for every Redis key redlock uses')
            [CompletionResult]::new('--meta-ttl', '--meta-ttl', [CompletionResultType]::ParameterName, 'Keep a lock''s record (fence counter, last holder) for DUR after its last use')
            [CompletionResult]::new('--log-max', '--log-max', [CompletionResultType]::ParameterName, 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting to Redis after DUR')
            [CompletionResult]::new('--io-timeout', '--io-timeout', [CompletionResultType]::ParameterName, 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'redlock;status' {
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'What to print: a table for people, JSON, or metrics in the Prometheus text format (exit 0 whether the locks are held or free)')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'PEM file with the private key of --tls-cert')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace for every Redis key redlock uses')
            [CompletionResult]::new('--meta-ttl', '--meta-ttl', [CompletionResultType]::ParameterName, 'Keep a lock''s record (fence counter, last holder) for DUR after its last use')
            [CompletionResult]::new('--log-max', '--log-max', [CompletionResultType]::ParameterName, 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting to Redis after DUR')
            [CompletionResult]::new('--io-timeout', '--io-timeout', [CompletionResultType]::ParameterName, 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON instead of a table: short for --format json')
            [CompletionResult]::new('--show-token', '--show-token', [CompletionResultType]::ParameterName, 'Show whole tokens instead of fingerprints')
            [CompletionResult]::new('--queue', '--queue', [CompletionResultType]::ParameterName, 'List the waiters of every lock too (named locks always list theirs, in queue order, below the table: who, what, for how long, until when; JSON always has them, under "queue")')
            [CompletionResult]::new('--watch', '--watch', [CompletionResultType]::ParameterName, 'Keep watching until Ctrl-C: on a terminal, redraw the table on every change and each second; with --json, print one JSON object per change (JSON Lines); otherwise, one line per change')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'redlock;log' {
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events of the last DUR (by the server''s clock)')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most the N most recent events (all that are kept, up to --log-max, by default)')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'PEM file with the private key of --tls-cert')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace for every Redis key redlock uses')
            [CompletionResult]::new('--meta-ttl', '--meta-ttl', [CompletionResultType]::ParameterName, 'Keep a lock''s record (fence counter, last holder) for DUR after its last use')
            [CompletionResult]::new('--log-max', '--log-max', [CompletionResultType]::ParameterName, 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting to Redis after DUR')
            [CompletionResult]::new('--io-timeout', '--io-timeout', [CompletionResultType]::ParameterName, 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl')
            [CompletionResult]::new('-f', '-f', [CompletionResultType]::ParameterName, 'Then keep printing events as they are written, until interrupted (exit 130 on Ctrl-C)')
            [CompletionResult]::new('--follow', '--follow', [CompletionResultType]::ParameterName, 'Then keep printing events as they are written, until interrupted (exit 130 on Ctrl-C)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'One JSON object per event and line (JSON Lines) instead of text')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'redlock;wait' {
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Wait at most DUR (default: until it is free)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Wait at most DUR (default: until it is free)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status when --wait runs out with the lock still busy')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit status when --wait runs out with the lock still busy')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis server URL: redis://, rediss:// (TLS), redis+unix:// or unix://; repeat for a quorum')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from FILE (its first line, at most 4 KiB); overrides the URL and $REDLOCK_PASSWORD')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'PEM file with the CA certificate(s) that signed the server''s certificate (rediss://)')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'PEM file with a client certificate for mutual TLS (rediss://, needs --tls-key)')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'PEM file with the private key of --tls-cert')
            [CompletionResult]::new('--sentinel', '--sentinel', [CompletionResultType]::ParameterName, 'The URLs are Sentinels: lock on the master they know as MASTER, found anew by every command')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Namespace for every Redis key redlock uses')
            [CompletionResult]::new('--meta-ttl', '--meta-ttl', [CompletionResultType]::ParameterName, 'Keep a lock''s record (fence counter, last holder) for DUR after its last use')
            [CompletionResult]::new('--log-max', '--log-max', [CompletionResultType]::ParameterName, 'Keep the last N events of each lock in its history (`redlock log`); 0 keeps none')
            [CompletionResult]::new('--connect-timeout', '--connect-timeout', [CompletionResultType]::ParameterName, 'Give up connecting to Redis after DUR')
            [CompletionResult]::new('--io-timeout', '--io-timeout', [CompletionResultType]::ParameterName, 'Give up on a Redis reply after DUR (a silent server never means a hang); with several --url it bounds each server''s reply, so keep it well under --ttl')
            [CompletionResult]::new('--cluster', '--cluster', [CompletionResultType]::ParameterName, 'The URLs are seed nodes of a Redis Cluster (the lock''s keys share one hash slot)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except errors (and whom `release --force` evicted)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Log every Redis round trip to stderr')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'redlock;help' {
            [CompletionResult]::new('exec', 'exec', [CompletionResultType]::ParameterValue, 'Take a lock, run a command while renewing it, release it when the command exits')
            [CompletionResult]::new('acquire', 'acquire', [CompletionResultType]::ParameterValue, 'Take a lock and print its token (the lock stays held after redlock exits)')
            [CompletionResult]::new('release', 'release', [CompletionResultType]::ParameterValue, 'Release a lock held with TOKEN (never someone else''s)')
            [CompletionResult]::new('extend', 'extend', [CompletionResultType]::ParameterValue, 'Reset the TTL of a lock held with TOKEN (an expired lock is never brought back)')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Show who holds locks: the named KEYs, or every lock under the prefix')
            [CompletionResult]::new('log', 'log', [CompletionResultType]::ParameterValue, 'Show a lock''s history: who took it, when, how long they waited and held it, how it ended')
            [CompletionResult]::new('wait', 'wait', [CompletionResultType]::ParameterValue, 'Wait until a lock is free, without taking it or joining its queue')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'redlock;help;exec' {
            break
        }
        'redlock;help;acquire' {
            break
        }
        'redlock;help;release' {
            break
        }
        'redlock;help;extend' {
            break
        }
        'redlock;help;status' {
            break
        }
        'redlock;help;log' {
            break
        }
        'redlock;help;wait' {
            break
        }
        'redlock;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
