//! The OpenAPI 3.1 document of the JSON API (`GET /api/openapi.json`). Written by hand, next
//! to the routes in `lib.rs`; a test checks that the two list the same operations.

use axum::Json;
use serde_json::{Value, json};

/// `GET /api/openapi.json`
pub(crate) async fn document() -> Json<Value> {
    Json(spec())
}

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
    })
}

fn ok(description: &str, schema: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": { "$ref": format!("#/components/schemas/{schema}") } } }
    })
}

fn path_param(name: &str, description: &str) -> Value {
    json!({ "name": name, "in": "path", "required": true, "description": description, "schema": { "type": "string" } })
}

fn query_param(name: &str, description: &str, schema: Value) -> Value {
    json!({ "name": name, "in": "query", "required": false, "description": description, "schema": schema })
}

/// The responses every action may give besides its own.
fn action_errors(mut responses: serde_json::Map<String, Value>) -> Value {
    responses.insert("401".into(), error_response("No bearer token, or a wrong one"));
    responses.insert(
        "429".into(),
        error_response("A wrong token past the limit on refused tokens, from this address or from all together (too_many_attempts; a correct token is always accepted), or too many requests at once (busy); see Retry-After"),
    );
    responses.insert(
        "403".into(),
        error_response("Read-only mode, no token configured, a token that may only read (forbidden), or a cross-site request"),
    );
    responses.insert("503".into(), error_response("Redis did not answer"));
    Value::Object(responses)
}

fn responses(pairs: Vec<(&str, Value)>) -> serde_json::Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

fn job_action(summary: &str, id: &str, ok_status: &str, ok_schema: &str) -> Value {
    json!({
        "post": {
            "summary": summary,
            "operationId": id,
            "security": [{ "bearer": [] }],
            "parameters": [path_param("name", "The job's name")],
            "responses": action_errors(responses(vec![
                (ok_status, ok(summary, ok_schema)),
                ("400", error_response("Invalid job name")),
                ("404", error_response("Unknown job")),
                ("409", error_response("No live replica, or a run already pending (run only)")),
            ])),
        }
    })
}

/// `POST /api/jobs/{name}/run`: a job action with an idempotency key.
fn run_action() -> Value {
    let mut operation =
        job_action("Run the job once now, on one live replica", "runJob", "202", "RunRequest");
    if let Some(parameters) = operation["post"]["parameters"].as_array_mut() {
        parameters.push(json!({
            "name": "Idempotency-Key", "in": "header", "required": false,
            "description": "1 to 64 letters, digits and `-_.:` (a new one per press or intent): the same key again within 10 minutes answers with the first request (`replayed`) and runs nothing more",
            "schema": { "type": "string", "maxLength": 64 }
        }));
    }
    operation
}

/// The document.
pub(crate) fn spec() -> Value {
    let object = json!({ "type": "object" });
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "lock-console",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Locks, jobs and scheduler replicas in Redis: read them, force-unlock a lock, pause, resume or run a job now, retry a failed run, backfill a range of slots. Reads are open unless the console requires a token (of either role) for them; actions need `Authorization: Bearer <token>` with an admin token. Every path may also answer 421 (`host_not_allowed`: the Host is neither loopback nor an allowed name), 429 (`busy`: too many requests at once) and 405 (`method_not_allowed`), each with a JSON error. Only locks, semaphores and read-write locks are read or released: any other key is 404 `not_a_lock`."
        },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": { "error": {
                        "type": "object",
                        "required": ["code", "message"],
                        "properties": {
                            "code": { "type": "string", "description": "Stable, machine-readable: invalid_job, unknown_job, invalid_key, invalid_input, invalid_limit, invalid_n, invalid_outcome, invalid_id, invalid_argument, invalid_backfill, unbounded_pattern, token_required, unauthorized, forbidden, too_many_attempts, read_only, no_token, cross_site, no_live_replica, run_pending, not_taken, unknown_run, not_failed, retry_pending, retried_already, not_on_schedule, redis_unavailable, no_route, ..." },
                            "message": { "type": "string" }
                        }
                    } }
                },
                "Holder": {
                    "type": "object",
                    "properties": {
                        "token": { "type": "string" },
                        "instance": { "type": ["string", "null"] },
                        "liveness_key": { "type": ["string", "null"] },
                        "alive": { "type": ["boolean", "null"] },
                        "released": { "type": "boolean" },
                        "expires_in_ms": { "type": ["integer", "null"] }
                    }
                },
                "LockList": {
                    "type": "object",
                    "properties": {
                        "pattern": { "type": "string" },
                        "limit": { "type": "integer" },
                        "partial": { "type": "boolean", "description": "The console's budget of holds to check ran out: more locks may match" },
                        "locks": { "type": "array", "items": {
                            "type": "object",
                            "properties": {
                                "key": { "type": "string" },
                                "kind": { "enum": ["lock", "semaphore", "rw-lock"] },
                                "holder": { "$ref": "#/components/schemas/Holder" },
                                "holders": { "type": "integer" },
                                "ttl_ms": { "type": ["integer", "null"] }
                            }
                        } }
                    }
                },
                "Lock": {
                    "type": "object",
                    "properties": {
                        "key": { "type": "string" },
                        "kind": { "enum": ["lock", "semaphore", "rw-lock"] },
                        "permits": { "type": ["integer", "null"] },
                        "held": { "type": "boolean" },
                        "holder": { "oneOf": [{ "$ref": "#/components/schemas/Holder" }, { "type": "null" }] },
                        "holders": { "type": "array", "items": { "$ref": "#/components/schemas/Holder" } },
                        "ttl_ms": { "type": ["integer", "null"] },
                        "fence": { "type": ["integer", "null"] },
                        "last_tick": { "type": ["integer", "null"] },
                        "waiters": { "type": "array", "items": object },
                        "live_waiters": { "type": "integer" },
                        "lapsed_waiters": { "type": "integer" },
                        "handoffs": { "type": "array", "items": object }
                    }
                },
                "Unlocked": {
                    "type": "object",
                    "properties": {
                        "key": { "type": "string" },
                        "released": { "type": "boolean" },
                        "holder": { "type": ["string", "null"] },
                        "instance": { "type": ["string", "null"] }
                    }
                },
                "Run": {
                    "type": "object",
                    "properties": {
                        "id": { "type": "string" },
                        "tick": { "type": "integer" },
                        "slot": { "type": ["string", "null"], "format": "date-time" },
                        "instance": { "type": "string" },
                        "outcome": { "type": "string" },
                        "duration_ms": { "type": "integer" },
                        "error": { "type": ["string", "null"] },
                        "manual_by": { "type": ["string", "null"] },
                        "request": { "type": ["string", "null"] },
                        "attempt": { "type": ["integer", "null"] },
                        "retry_at": { "type": ["string", "null"], "format": "date-time" },
                        "gave_up": { "type": "boolean" },
                        "backfill": { "type": "boolean" }
                    }
                },
                "PendingRetry": {
                    "type": "object",
                    "properties": {
                        "group": { "type": "string" },
                        "job": { "type": "string" },
                        "tick": { "type": "integer" },
                        "attempt": { "type": "integer" },
                        "due": { "type": "string", "format": "date-time" }
                    }
                },
                "JobList": {
                    "type": "object",
                    "properties": {
                        "partial": { "type": "boolean", "description": "The shared snapshot's time budget ran out before the jobs were read: the list may be incomplete" },
                        "age_ms": { "type": "integer", "description": "How old the shared snapshot is" },
                        "jobs": { "type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "name": { "type": "string" },
                            "group": { "type": ["string", "null"] },
                            "schedule": { "type": ["string", "null"] },
                            "time_zone": { "type": ["string", "null"] },
                            "schedule_origin": { "type": ["string", "null"], "description": "Where the schedule in force came from: `code`, `config` (SchedulerBuilder::schedule_override) or `env <VARIABLE>`" },
                            "next_slot": { "type": ["string", "null"], "format": "date-time" },
                            "paused": { "type": "boolean" },
                            "paused_info": { "type": ["string", "null"] },
                            "last_slot": { "type": ["string", "null"], "format": "date-time" },
                            "last_outcome": { "type": ["string", "null"] },
                            "last_duration_ms": { "type": ["integer", "null"] },
                            "last_instance": { "type": ["string", "null"] },
                            "last_run": { "oneOf": [{ "$ref": "#/components/schemas/Run" }, { "type": "null" }] },
                            "failures_24h": { "type": "integer" },
                            "next_retry": { "oneOf": [{ "$ref": "#/components/schemas/PendingRetry" }, { "type": "null" }] }
                        }
                    } } }
                },
                "Health": {
                    "type": "object",
                    "properties": {
                        "status": { "enum": ["ok", "unavailable"] },
                        "reason": { "type": "string", "description": "why Redis is not ready (only with `unavailable`)" }
                    }
                },
                "History": {
                    "type": "object",
                    "properties": {
                        "job": { "type": "string" },
                        "runs": { "type": "array", "items": { "$ref": "#/components/schemas/Run" } },
                        "next_before": { "type": ["string", "null"], "description": "Give it as `before` for the next page; null at the end of the history" },
                        "scanned": { "type": "integer", "description": "History entries examined" },
                        "cut": { "type": "boolean", "description": "A filtered search stopped after examining 1000 entries without finding `n` runs: more may match from `next_before` on" }
                    }
                },
                "RunDetail": {
                    "type": "object",
                    "properties": {
                        "job": { "type": "string" },
                        "run": { "$ref": "#/components/schemas/Run" },
                        "slot_runs": { "type": "array", "items": { "$ref": "#/components/schemas/Run" }, "description": "Every run of the same slot the history keeps (empty for a run-now)" },
                        "retry": {
                            "type": "object",
                            "properties": {
                                "possible": { "type": "boolean" },
                                "reason": { "type": ["object", "null"], "description": "Why not: `{code, message}` (not_failed, retry_pending, retried_already)" }
                            }
                        }
                    }
                },
                "Retried": {
                    "type": "object",
                    "properties": {
                        "job": { "type": "string" },
                        "retried": { "type": "string", "description": "The failed run's id" },
                        "via": { "enum": ["backfill", "run_now"], "description": "A slot's run is retried as a backfill of that slot; a run-now as a new run-now" },
                        "group": { "type": "string" },
                        "slot": { "type": "string", "format": "date-time" },
                        "queued": { "type": "array", "items": { "type": "string", "format": "date-time" } },
                        "run_request": { "$ref": "#/components/schemas/RunRequest" }
                    }
                },
                "Backfilled": {
                    "type": "object",
                    "properties": {
                        "job": { "type": "string" },
                        "group": { "type": "string" },
                        "from": { "type": "string", "format": "date-time" },
                        "to": { "type": "string", "format": "date-time" },
                        "force": { "type": "boolean" },
                        "queued": { "type": "array", "items": { "type": "string", "format": "date-time" } },
                        "refused": { "type": "array", "items": { "type": "string", "format": "date-time" }, "description": "Slots left out because they already ran (without force)" }
                    }
                },
                "Stats": {
                    "type": "object",
                    "properties": {
                        "job": { "type": "string" },
                        "bucket": { "enum": ["hour", "day"], "description": "Hours while the history reaches back at most 48 hours, days beyond" },
                        "runs": { "type": "integer" },
                        "since": { "type": ["string", "null"], "format": "date-time" },
                        "cut": { "type": "boolean", "description": "The history holds more than 2000 entries: the oldest were not counted" },
                        "age_ms": { "type": "integer", "description": "How old the read of the history is (kept 30 s)" },
                        "buckets": { "type": "array", "items": {
                            "type": "object",
                            "properties": {
                                "start": { "type": "string", "format": "date-time" },
                                "succeeded": { "type": "integer" },
                                "failed": { "type": "integer" },
                                "other": { "type": "integer" }
                            }
                        } }
                    }
                },
                "Paused": {
                    "type": "object",
                    "properties": {
                        "job": { "type": "string" },
                        "paused": { "type": "boolean" },
                        "was_paused": { "type": "boolean", "description": "Pause: it was paused already (the flag now names this token's owner); resume: it was paused" },
                        "by": { "type": "string" }
                    }
                },
                "RunRequest": {
                    "type": "object",
                    "properties": {
                        "request": { "type": "string" },
                        "job": { "type": "string" },
                        "group": { "type": "string" },
                        "by": { "type": "string" },
                        "requested_at": { "type": "string", "format": "date-time" },
                        "replayed": { "type": "boolean", "description": "The Idempotency-Key was used before: this is the first request's answer, and nothing more was asked" }
                    }
                },
                "Replicas": {
                    "type": "object",
                    "properties": {
                        "partial": { "type": "boolean" },
                        "age_ms": { "type": "integer" },
                        "replicas": { "type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "group": { "type": "string" },
                            "instance": { "type": "string" },
                            "live": { "type": "boolean" },
                            "lapses_in_ms": { "type": "integer" },
                            "version": { "type": ["string", "null"], "description": "as the replica was given it (SchedulerBuilder::version); empty if none, null if it said nothing" },
                            "host": { "type": ["string", "null"] },
                            "started_at": { "type": ["string", "null"], "format": "date-time" },
                            "running": { "type": ["array", "null"], "items": { "type": "string" }, "description": "jobs it was running at its last announcement" }
                        }
                    } } }
                }
            }
        },
        "paths": {
            "/healthz": { "get": {
                "summary": "Liveness, as /livez: the console is serving (no Redis round trip; no host check, no token)", "operationId": "health",
                "responses": { "200": ok("Serving", "Health") }
            } },
            "/livez": { "get": {
                "summary": "Liveness: the console is serving (no Redis round trip; no host check, no token)", "operationId": "live",
                "responses": { "200": ok("Serving", "Health") }
            } },
            "/readyz": { "get": {
                "summary": "Readiness: Redis answers a PING within 1 s (no host check, no token)", "operationId": "ready",
                "responses": { "200": ok("Redis answers", "Health"), "503": ok("Redis does not answer (`reason` says why)", "Health") }
            } },
            "/api/openapi.json": { "get": {
                "summary": "This document", "operationId": "openapi",
                "responses": { "200": { "description": "The OpenAPI document", "content": { "application/json": {} } } }
            } },
            "/api/locks": { "get": {
                "summary": "Held locks whose key matches a glob pattern", "operationId": "listLocks",
                "parameters": [
                    query_param("pattern", "Redis MATCH glob; one with no literal prefix (`*`) needs an explicit limit", json!({ "type": "string" })),
                    query_param("limit", "At most this many locks (1 to 1000, default 100)", json!({ "type": "integer", "minimum": 1, "maximum": 1000 }))
                ],
                "responses": {
                    "200": ok("The locks", "LockList"),
                    "400": error_response("Bad pattern or limit"),
                    "503": error_response("Redis did not answer")
                }
            } },
            "/api/locks/{key}": {
                "get": {
                    "summary": "One lock: holder, instance, alive, TTL, fence, waiters", "operationId": "getLock",
                    "parameters": [path_param("key", "The lock key (percent-encode `/`)")],
                    "responses": {
                        "200": ok("The lock (held or not)", "Lock"),
                        "400": error_response("Invalid key"),
                        "404": error_response("The key is not a lock, semaphore or read-write lock (not_a_lock); its value is not shown"),
                        "503": error_response("Redis did not answer")
                    }
                },
                "delete": {
                    "summary": "Force-release the lock, or one hold of a semaphore or read-write lock", "operationId": "unlock",
                    "security": [{ "bearer": [] }],
                    "parameters": [
                        path_param("key", "The lock key"),
                        query_param("token", "The hold to release (required for a semaphore or a read-write lock with readers)", json!({ "type": "string" }))
                    ],
                    "responses": action_errors(responses(vec![
                        ("200", ok("What was released", "Unlocked")),
                        ("400", error_response("Invalid key or token")),
                        ("404", error_response("The key is not a lock, semaphore or read-write lock (not_a_lock); left alone")),
                        ("409", error_response("A token is needed, or the lock kept changing hands")),
                    ]))
                }
            },
            "/api/jobs": { "get": {
                "summary": "Every job seen: schedule, next slot, paused, last run, failures in 24 h", "operationId": "listJobs",
                "responses": { "200": ok("The jobs", "JobList"), "503": error_response("Redis did not answer") }
            } },
            "/api/jobs/{name}/history": { "get": {
                "summary": "A job's runs, newest first: searched, filtered and paged through the whole history", "operationId": "jobHistory",
                "parameters": [
                    path_param("name", "The job's name"),
                    query_param("n", "How many runs (1 to 1000, default 100)", json!({ "type": "integer", "minimum": 1, "maximum": 1000 })),
                    query_param("before", "Runs recorded before this run's id (the previous page's next_before)", json!({ "type": "string" })),
                    query_param("outcome", "Only runs that succeeded, failed (failed or timed out), were skipped, or other (missed, cancelled, replaced)", json!({ "enum": ["any", "succeeded", "failed", "skipped", "other"] })),
                    query_param("q", "Only runs whose error, instance, requester, request or outcome holds this text (any case)", json!({ "type": "string", "maxLength": 200 }))
                ],
                "responses": {
                    "200": ok("The runs", "History"),
                    "400": error_response("Invalid job name, n, before, outcome or q"),
                    "404": error_response("Unknown job"),
                    "503": error_response("Redis did not answer")
                }
            } },
            "/api/jobs/{name}/stats": { "get": {
                "summary": "A job's succeeded, failed and other runs per hour (or day), over the history kept", "operationId": "jobStats",
                "parameters": [path_param("name", "The job's name")],
                "responses": {
                    "200": ok("The counts", "Stats"),
                    "400": error_response("Invalid job name"),
                    "404": error_response("Unknown job"),
                    "503": error_response("Redis did not answer")
                }
            } },
            "/api/jobs/{name}/runs/{id}": { "get": {
                "summary": "One run in full, the other runs of its slot, and whether it can be retried", "operationId": "getRun",
                "parameters": [path_param("name", "The job's name"), path_param("id", "The run's id (`<ms>-<seq>`, a history entry's)")],
                "responses": {
                    "200": ok("The run", "RunDetail"),
                    "400": error_response("Invalid job name or id"),
                    "404": error_response("Unknown job, or no such run in the history (unknown_run)"),
                    "503": error_response("Redis did not answer")
                }
            } },
            "/api/jobs/{name}/runs/{id}/retry": { "post": {
                "summary": "Run a failed run's slot once more (a run-now's: a new run-now)", "operationId": "retryRun",
                "security": [{ "bearer": [] }],
                "parameters": [path_param("name", "The job's name"), path_param("id", "The failed run's id")],
                "responses": action_errors(responses(vec![
                    ("202", ok("Queued (or requested)", "Retried")),
                    ("400", error_response("Invalid job name or id")),
                    ("404", error_response("Unknown job or run")),
                    ("409", error_response("Not a failed run (not_failed), a retry of the slot already waiting (retry_pending), the slot ran again since (retried_already), the slot no longer on the schedule (not_on_schedule), or no live replica")),
                ]))
            } },
            "/api/jobs/{name}/backfill": { "post": {
                "summary": "Run every slot of the job between two times once, on a live replica, as if on time", "operationId": "backfillJob",
                "security": [{ "bearer": [] }],
                "parameters": [
                    path_param("name", "The job's name"),
                    { "name": "from", "in": "query", "required": true, "description": "The first instant: RFC 3339, or 2026-12-01T00:00[:00] taken as UTC", "schema": { "type": "string" } },
                    { "name": "to", "in": "query", "required": true, "description": "The last instant, included", "schema": { "type": "string" } },
                    query_param("force", "Also slots the history shows already ran (`1`, `true` or `on`)", json!({ "type": "string" }))
                ],
                "responses": action_errors(responses(vec![
                    ("202", ok("Queued", "Backfilled")),
                    ("400", error_response("Invalid job name, or a range that is missing, backwards, in the future or over 1000 slots (invalid_backfill)")),
                    ("404", error_response("Unknown job")),
                ]))
            } },
            "/api/jobs/{name}/pause": job_action("Pause the job on every replica", "pauseJob", "200", "Paused"),
            "/api/jobs/{name}/resume": job_action("Resume the job", "resumeJob", "200", "Paused"),
            "/api/jobs/{name}/run": run_action(),
            "/api/replicas": { "get": {
                "summary": "The scheduler groups' replicas and their liveness", "operationId": "listReplicas",
                "responses": { "200": ok("The replicas", "Replicas"), "503": error_response("Redis did not answer") }
            } }
        }
    })
}
