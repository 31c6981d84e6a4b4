//! The simulated tool gateway over real HTTP (docs/contract.md#simulated-tool-gateway): a loopback
//! server speaking the tool gateway API of docs/contract.md#tool-gateway-api, so everything runs
//! with no account anywhere.
//!
//! [`SimToolGateway::start`] runs one on its own thread (tests, the CLI); [`SimServer::bind`] +
//! [`SimServer::serve`] (or [`serve`]) embed one in a caller's smol executor. The world itself,
//! [`SimWorld`], is plain data with a sans-IO [`SimWorld::handle`]. Nothing is written to
//! stdout or stderr: the caller announces the address.
//!
//! # Routes
//!
//! - `GET /v1/connectors` — `{"items": [{"connector", "enabled", "connected",
//!   "statusReason"?}], "nextCursor": null}`; `connected` = the connector has an `active`
//!   account; `statusReason` = that of the connector's latest account, if any.
//! - `POST /v1/connectors/connections` — `{"results": [...], "summary": {"requested",
//!   "active", "initiated", "failed"}}`. Unlisted → `failed` / `unknown connector`; an active
//!   account and `reinitiate: false` → `active` with its id; otherwise a new pending account
//!   `ca_<slug>_<32 hex digits>` (128 random bits: a link cannot be guessed; tests may inject
//!   [`LinkIds::Numbered`], `ca_<slug>_<n>` with `n` the 1-based mint call) → `initiated` with
//!   `connectUrl` `http://<addr>/connect/<id>` (and `reinitiated: true` when it replaces an
//!   active one). A `returnTo` must be an app's name (`connop-desktop`: 1 to 128 letters,
//!   digits, `.`, `_`, `-`) or an `http://` URL on a loopback host in printable ASCII; anything
//!   else is 400 and nothing is minted.
//! - `GET /v1/connectors/accounts/<id>` — `{"connectionId", "connector", "status",
//!   "statusReason"?, "label", "active", "createdAt", "updatedAt"}` (RFC 3339 UTC times); an
//!   unknown id → 404 `{"error": "connection_not_found"}`.
//! - `GET /connect/<id>` — the vendor's consent page (HTML, docs/contract.md#consent-page): the
//!   requesting app (the mint's `returnTo`, or "an app"), the connector, the account label, the
//!   scopes, and Approve and Deny in one form with a one-time nonce. It never changes anything.
//! - `POST /connect/<id>` (`nonce=…&decision=approve|deny`) — decides once: `active`, or
//!   `failed` with `user denied access`. A missing or unknown nonce → 400, nothing changes; a
//!   link already decided or superseded by a newer mint of its connector → 409 page saying
//!   so; an unknown link → 404. After a decision the browser goes back (303) to the mint's
//!   `returnTo` when it is an `http://` URL on a loopback host, with
//!   `connection_id=<id>&status=active|failed` added to its query; otherwise a page says
//!   what was decided.
//! - With a token every `/v1/...` and `/sim/...` route needs `Authorization: Bearer <token>`
//!   (else 401 `{"error": "unauthorized"}`); only `/connect/...` (the person's browser) is open.
//! - Before any of that, every request passes the listener's guard
//!   ([`crate::net::guard`]): a `Host` other than the gateway's names is 421; a write
//!   whose body is not JSON (a form on `/connect/...`) is 415; a write from a page of another
//!   origin, `null` included, is 403; a body over [`MAX_BODY`] ([`MAX_CONTROL_BODY`] for a
//!   `/sim/...` control that carries the token) is 413, by its `Content-Length` before it is
//!   read or as it arrives, and one that stalls is 408. Such a request never reaches the world, and is not logged. The answer is a page on
//!   `/connect/...`, `{"error", "detail"}` elsewhere.
//! - With auto-complete, a minted account still `pending` that long after its mint becomes
//!   `active` (evaluated lazily on every request).
//!
//! # Test controls (JSON bodies; answer `{"ok": true}` or 400 `{"error": "bad_request",
//! "detail"}`)
//!
//! - `POST /sim/state` — absent keys keep their value; an unknown key is refused:
//!   - `"connected": [slugs]`: exactly these connectors have an active account (one is made
//!     as `ca_<slug>_0` when missing; other connectors' active accounts become `inactive`);
//!   - `"listed": [slugs]`: what the list shows and the mint accepts (any names, in order);
//!   - `"mint": {"<slug>": {"status": "active"|"initiated"|"failed", "statusReason"?,
//!     "connectionId"?: bool}}`: forced mint answers (`connectionId` defaults to "yes unless
//!     failed"; a forced `failed` with an id makes a `failed` account).
//!
//!   **Extension** (so the in-process `ScriptedToolGateway` scenarios also run over HTTP):
//!   - `"flips": {"<slug>": n}`: that connector's accounts answer `active` from their n-th
//!     read on, `pending` before;
//!   - `"scripts": {"<slug>": [step, ...]}`: successive reads of one of that connector's
//!     accounts answer these steps, the last repeating; a step is a status string
//!     (`"pending"`, `"active"`, `"failed"`, `"expired"`, `"revoked"`, `"inactive"`),
//!     `{"status", "statusReason"?}`, or `{"http": 404}` / `{"http": 500}` /
//!     `{"http": 429, "retry_after_ms": 2000}` (and an optional verbatim `"body"`);
//!   - `"statusReason": str|null`: a reason on every mint row and account answer that has
//!     none of its own (`ScriptedToolGateway::status_reason`);
//!   - `"connectionIds": false`: mint rows carry no `connectionId` (accounts and connect
//!     links still exist; `ScriptedToolGateway::without_connection_ids`).
//!
//!   An account read answers, in order: the connector's script, then its flip, then the
//!   account's own status: the core's `ReadScript`, which the fixtures' `ScriptedToolGateway`
//!   follows too. Reads are counted per account: every authorized read counts, a faulted one
//!   included.
//! - `POST /sim/faults {"faults": [{"route": "list"|"mint"|"account", "status"?,
//!   "retry_after_ms"?, "delay_ms"?, "body"?, "reset"?, "count"}]}` — the next `count`
//!   (default 1) authorized requests on that route wait `delay_ms`, then answer `status`
//!   (default 200) with `body` verbatim, or a JSON `{"error"}` body (429 adds `retryAfterMs`
//!   and a `Retry-After` header in whole seconds, rounded up). A fault with only a delay
//!   delays the normal answer. **Extension**: `"reset": true` closes the connection after the
//!   delay without answering at all (the request is still handled and logged: a mint still
//!   makes its accounts). Faults on one route are used in the order queued.
//! - `POST /sim/accounts/<id> {"status", "statusReason"?, "connector"?}` — sets one account
//!   (404 when unknown, unless `connector` is given: then it is created).
//! - `GET /sim/log` — `{"requests": [{"method", "path", "query", "headers", "body"}]}`: every
//!   request the guard let through, to every route, in order, this one included (`query` is
//!   `""` when absent).
//! - `POST /sim/reset` (**extension**) — back to the initial world; the log is cleared too.

pub mod consent;
mod options;
mod server;
mod world;

pub use options::{LinkIds, SimOptions};
pub use server::{MAX_BODY, MAX_CONTROL_BODY, RandomIds, SimServer, SimToolGateway, serve};
pub use world::{
    ControlError, IdSource, NumberedIds, SimAccount, SimRequest, SimResponse, SimWorld,
    UNKNOWN_CONNECTOR, USER_DENIED,
};
