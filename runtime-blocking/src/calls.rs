//! How the blocking runtime runs gateway calls.
//!
//! - [`InlineCalls`]: on the thread that pumps the effect. Right for an in-process gateway
//!   that answers at once; an interrupt then waits at most for that instant call.
//! - [`WorkerCalls`]: on one worker thread per operation, in order, so the operation's own
//!   thread stays free to settle at once on an interrupt, a card answer or the deadline while
//!   an HTTP call is out. A call whose answer the flow no longer awaits (it settled) is not
//!   started.

use crate::handle::{CallStarter, OpHandle};
use connop_core::tool_gateway::{BlockingToolGateway, CallId, GatewayCall};
use std::sync::mpsc::{SendError, Sender, channel};
use std::sync::{Arc, Mutex};

/// Runs each call on the pumping thread.
pub struct InlineCalls(pub Arc<dyn BlockingToolGateway>);

impl CallStarter for InlineCalls {
    fn start(&self, op: &OpHandle, id: CallId, call: GatewayCall) {
        let result = self.0.call(&call);
        op.deliver(id, result);
    }
}

/// Runs calls on one worker thread per operation, spawned on the first call.
pub struct WorkerCalls {
    gateway: Arc<dyn BlockingToolGateway>,
    queue: Mutex<Option<Sender<(OpHandle, CallId, GatewayCall)>>>,
}

impl WorkerCalls {
    /// Calls through `gateway`.
    pub fn new(gateway: Arc<dyn BlockingToolGateway>) -> Self {
        WorkerCalls {
            gateway,
            queue: Mutex::new(None),
        }
    }
}

impl CallStarter for WorkerCalls {
    fn start(&self, op: &OpHandle, id: CallId, call: GatewayCall) {
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let sender = queue.get_or_insert_with(|| {
            let (tx, rx) = channel::<(OpHandle, CallId, GatewayCall)>();
            let gateway = self.gateway.clone();
            std::thread::Builder::new()
                .name("connop-gateway-calls".into())
                .spawn(move || {
                    for (op, id, call) in rx {
                        if op.awaits(id) {
                            let result = gateway.call(&call);
                            op.deliver(id, result);
                        }
                    }
                })
                .map(|_| tx)
                .unwrap_or_else(|_| channel().0)
        });
        if let Err(SendError((op, id, call))) = sender.send((op.clone(), id, call)) {
            // No worker (the thread could not be spawned): run the call on this thread.
            drop(queue);
            let result = self.gateway.call(&call);
            op.deliver(id, result);
        }
    }
}
