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
        error_response("Too many refused tokens from this address (too_many_attempts), or too many requests at once (busy); see Retry-After"),
    );
    responses
        .insert("403".into(), error_response("Read-only mode, no token configured, or a cross-site request"));
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

/// The document.
pub(crate) fn spec() -> Value {
    let object = json!({ "type": "object" });
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "lock-console",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Locks, jobs and scheduler replicas in Redis: read them, force-unlock a lock, pause, resume or run a job now. Reads are open unless the console requires the token for them; actions need `Authorization: Bearer <token>`. Every path may also answer 421 (`host_not_allowed`: the Host is neither loopback nor an allowed name), 429 (`busy`: too many requests at once) and 405 (`method_not_allowed`), each with a JSON error. Only locks, semaphores and read-write locks are read or released: any other key is 404 `not_a_lock`."
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
                            "code": { "type": "string", "description": "Stable, machine-readable: invalid_job, unknown_job, invalid_key, invalid_input, invalid_limit, invalid_n, unbounded_pattern, token_required, unauthorized, read_only, no_token, cross_site, no_live_replica, run_pending, not_taken, redis_unavailable, no_route, ..." },
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
                        "partial": { "type": "boolean", "description": "The console's budget of keys to scan ran out: more locks may match" },
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
                    "properties": { "status": { "const": "ok" } }
                },
                "History": {
                    "type": "object",
                    "properties": {
                        "job": { "type": "string" },
                        "runs": { "type": "array", "items": { "$ref": "#/components/schemas/Run" } }
                    }
                },
                "Paused": {
                    "type": "object",
                    "properties": {
                        "job": { "type": "string" },
                        "paused": { "type": "boolean" },
                        "was_paused": { "type": "boolean" }
                    }
                },
                "RunRequest": {
                    "type": "object",
                    "properties": {
                        "request": { "type": "string" },
                        "job": { "type": "string" },
                        "group": { "type": "string" },
                        "by": { "type": "string" },
                        "requested_at": { "type": "string", "format": "date-time" }
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
                "summary": "The console is serving (no Redis round trip; no host check, no token)", "operationId": "health",
                "responses": { "200": ok("Serving", "Health") }
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
                "summary": "A job's last runs, newest first", "operationId": "jobHistory",
                "parameters": [
                    path_param("name", "The job's name"),
                    query_param("n", "How many runs (1 to 1000, default 100)", json!({ "type": "integer", "minimum": 1, "maximum": 1000 }))
                ],
                "responses": {
                    "200": ok("The runs", "History"),
                    "400": error_response("Invalid job name or n"),
                    "404": error_response("Unknown job"),
                    "503": error_response("Redis did not answer")
                }
            } },
            "/api/jobs/{name}/pause": job_action("Pause the job on every replica", "pauseJob", "200", "Paused"),
            "/api/jobs/{name}/resume": job_action("Resume the job", "resumeJob", "200", "Paused"),
            "/api/jobs/{name}/run": job_action("Run the job once now, on one live replica", "runJob", "202", "RunRequest"),
            "/api/replicas": { "get": {
                "summary": "The scheduler groups' replicas and their liveness", "operationId": "listReplicas",
                "responses": { "200": ok("The replicas", "Replicas"), "503": error_response("Redis did not answer") }
            } }
        }
    })
}
