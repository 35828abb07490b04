#!/usr/bin/env bash
# Start a throwaway PostgreSQL cluster on loopback for sqlweave's tests and experiments.
#
#   eval "$(.ci/postgres.sh)"     # or: source .ci/postgres.sh
#   .ci/postgres.sh stop          # stop the cluster (data stays; the next start reuses it)
#   .ci/postgres.sh destroy       # stop it and remove its directory
#
# Idempotent: a second call reuses the running cluster and prints the same URLs. On a fresh
# Debian machine (root, no services running) it installs Debian's `postgresql` package when
# `initdb`/`pg_ctl` are missing. Everything the script reports goes to stderr; stdout carries
# only the `export` lines:
#
#   SQLWEAVE_PG_URL     owner role (creates schemas; used by sqlweave.transfer and the tests)
#   SQLWEAVE_PG_RO_URL  a login role that can only SELECT and defaults to read-only
#                       transactions: the role to run untrusted (generated) SQL as
#   SQLWEAVE_PG_SUPER_URL  the cluster's superuser over TCP, for tests that check what
#                       sqlweave refuses (Database.open needs allow_superuser=True for it)
#
# In the sqlweave database, functions that run SQL given as text or reach other sessions
# (query_to_xml and kin, ts_stat, pg_logical_emit_message, pg_terminate_backend, ...) are
# revoked from PUBLIC: an engine-side backstop behind sqlweave's own function check.
#
# Settings (environment): SQLWEAVE_PG_BASE (default sqlweave-pg in the temporary folder,
# $TMPDIR or the system's), SQLWEAVE_PG_PORT
# (default 55432; the next free port is taken when it is busy), SQLWEAVE_PG_PASSWORD.

_sqlweave_pg_main() (
    set -euo pipefail

    local base="${SQLWEAVE_PG_BASE:-$(dirname "$(mktemp -u)")/sqlweave-pg}"
    local data="$base/data"
    local sock="$base/run"
    local port="${SQLWEAVE_PG_PORT:-55432}"
    local password="${SQLWEAVE_PG_PASSWORD:-sqlweave}"
    local db=sqlweave owner=sqlweave reader=sqlweave_ro
    local action="${1:-start}"

    log() { echo "postgres.sh: $*" >&2; }

    find_bindir() {
        if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
            dirname "$(readlink -f "$(command -v pg_ctl)")"
            return 0
        fi
        # Debian keeps the server binaries off PATH.
        local dir
        dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
        [[ -n "$dir" && -x "$dir/initdb" ]] && echo "$dir"
    }

    local bindir
    bindir="$(find_bindir || true)"
    if [[ -z "$bindir" ]]; then
        [[ "$action" == start ]] || { log "no PostgreSQL installed"; return 0; }
        [[ "$(id -u)" == 0 ]] || { log "PostgreSQL is missing and we are not root"; return 1; }
        log "installing Debian's postgresql package"
        apt-cache policy postgresql >&2 || true
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2
        apt-get install -y -qq postgresql >&2
        bindir="$(find_bindir)"
    fi

    # The server refuses to run as root: as root, act as the `postgres` user.
    local as=()
    if [[ "$(id -u)" == 0 ]]; then
        id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
        as=(runuser -u postgres --)
    fi

    running() { "${as[@]}" "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; }

    case "$action" in
        stop)
            running && "${as[@]}" "$bindir/pg_ctl" -D "$data" -m fast -w stop >&2
            return 0
            ;;
        destroy)
            running && "${as[@]}" "$bindir/pg_ctl" -D "$data" -m immediate -w stop >&2
            rm -rf "$base"
            return 0
            ;;
        start) ;;
        *) log "unknown action '$action' (start|stop|destroy)"; return 2 ;;
    esac

    mkdir -p "$base"
    chmod 755 "$base"
    if [[ ! -s "$data/PG_VERSION" ]]; then
        log "initialising a cluster in $data"
        rm -rf "$data"
        mkdir -p "$data" "$sock"
        [[ ${#as[@]} -gt 0 ]] && chown postgres: "$data" "$sock"
        chmod 700 "$data"
        local pwfile
        pwfile="$(mktemp)"
        printf '%s\n' "$password" >"$pwfile"
        [[ ${#as[@]} -gt 0 ]] && chown postgres: "$pwfile"
        # Trust on the private socket only; TCP needs a password.
        "${as[@]}" "$bindir/initdb" -D "$data" -U postgres --pwfile="$pwfile" -E UTF8 \
            --no-locale --auth-local=trust --auth-host=scram-sha-256 >&2
        rm -f "$pwfile"
    fi
    mkdir -p "$sock"
    [[ ${#as[@]} -gt 0 ]] && chown postgres: "$sock"

    if running; then
        port="$(sed -n 4p "$data/postmaster.pid")"
        log "cluster already running on port $port"
    else
        # Take the next free loopback port.
        while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
            port=$((port + 1))
        done
        log "starting PostgreSQL on 127.0.0.1:$port"
        # A throwaway cluster: durability settings off for speed.
        "${as[@]}" "$bindir/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 start -o \
            "-c listen_addresses=127.0.0.1 -p $port -k $sock -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off" >&2
    fi

    local psql=("${as[@]}" "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$sock" -p "$port" -U postgres)
    "${psql[@]}" -d postgres >&2 <<SQL
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L NOSUPERUSER NOCREATEDB NOCREATEROLE', '$owner', '$password')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$owner') \gexec
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L NOSUPERUSER NOCREATEDB NOCREATEROLE', '$reader', '$password')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$reader') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', '$db', '$owner')
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$db') \gexec
ALTER ROLE $reader SET default_transaction_read_only = on;
ALTER ROLE $reader SET statement_timeout = '120s';
SQL
    "${psql[@]}" -d "$db" >&2 <<SQL
REVOKE ALL ON DATABASE $db FROM PUBLIC;
GRANT CONNECT ON DATABASE $db TO $reader;
GRANT CONNECT, CREATE, TEMPORARY ON DATABASE $db TO $owner;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO $reader;
-- Schemas and tables the owner creates later (one schema per copied database) are readable.
ALTER DEFAULT PRIVILEGES FOR ROLE $owner GRANT USAGE ON SCHEMAS TO $reader;
ALTER DEFAULT PRIVILEGES FOR ROLE $owner GRANT SELECT ON TABLES TO $reader;
-- No login role needs these; each runs SQL from a string, writes WAL or signals other sessions.
DO \$\$
DECLARE f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace
          AND (p.proname IN ('ts_stat', 'pg_logical_emit_message', 'pg_terminate_backend',
                             'pg_cancel_backend', 'txid_current', 'pg_current_xact_id', 'pg_notify')
               OR p.proname ~ '^(query|cursor|table|schema|database)_to_xml'
               OR (p.proname = 'ts_rewrite' AND p.provolatile = 'v'))
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
\$\$;
SQL

    local url="postgresql://$owner:$password@127.0.0.1:$port/$db"
    local ro_url="postgresql://$reader:$password@127.0.0.1:$port/$db"
    local super_url="postgresql://postgres:$password@127.0.0.1:$port/$db"
    printf 'export SQLWEAVE_PG_URL=%q\nexport SQLWEAVE_PG_RO_URL=%q\nexport SQLWEAVE_PG_SUPER_URL=%q\n' \
        "$url" "$ro_url" "$super_url" | tee "$base/env"
    log "ready: SQLWEAVE_PG_URL=$url"
)

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
    # Sourced: export into the caller's shell without leaking `set -e` into it.
    if _sqlweave_pg_out="$(_sqlweave_pg_main "$@")"; then
        eval "$_sqlweave_pg_out"
        unset _sqlweave_pg_out
    else
        echo "postgres.sh: failed" >&2
        unset _sqlweave_pg_out
        return 1
    fi
else
    _sqlweave_pg_main "$@"
fi
