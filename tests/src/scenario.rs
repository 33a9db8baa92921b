//! One scenario's world: aimock with the shared fixtures, and a server pointed at it.

use crate::aimock::{Aimock, Fixtures};
use crate::client::Client;
use crate::error::HarnessResult;
use crate::server::{Server, ServerOptions, TENANT_A, TENANT_B};

/// aimock + server. Field order matters: the server is dropped (killed) first, then aimock
/// checks the pairing invariant on every model request it received.
pub struct Scenario {
    /// The server under test.
    pub server: Server,
    /// The model server.
    pub mock: Aimock,
}

impl Scenario {
    /// Shared fixtures and a default server built from `server_bin`.
    pub fn start(server_bin: &str) -> HarnessResult<Self> {
        Self::start_with(server_bin, |options| options)
    }

    /// Like [`Scenario::start`], with extra server options (timing knobs, workers).
    pub fn start_with(
        server_bin: &str,
        configure: impl FnOnce(ServerOptions) -> ServerOptions,
    ) -> HarnessResult<Self> {
        let mock = Aimock::start(Fixtures::scenarios())?;
        let options = configure(ServerOptions::new(server_bin).model_server(&mock));
        let server = Server::start(options)?;
        Ok(Scenario { server, mock })
    }

    /// A client of tenant A (on the current server process).
    pub fn a(&self) -> Client {
        self.server.client(TENANT_A)
    }

    /// A client of tenant B.
    pub fn b(&self) -> Client {
        self.server.client(TENANT_B)
    }
}
