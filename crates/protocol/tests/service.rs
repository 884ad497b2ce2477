//! The generated tonic services exist and talk: an Admin server on loopback, backed by a
//! real engine, answers one `Submit` from the generated client, and a duplicate gets the
//! original outcome.

use std::sync::Mutex;

use bourse_engine::command::{Command, CommandBody};
use bourse_engine::{ClientId, Engine};
use bourse_protocol::convert;
use bourse_protocol::proto;
use bourse_protocol::proto::admin_client::AdminClient;
use bourse_protocol::proto::admin_server::{Admin, AdminServer};
use tonic::{Request, Response, Status};

/// Every service trait is generated (checked at compile time).
#[allow(dead_code)]
fn services_exist<A, O, Q, M>()
where
    A: proto::admin_server::Admin,
    O: proto::order_entry_server::OrderEntry,
    Q: proto::query_server::Query,
    M: proto::market_data_server::MarketData,
{
}

/// A node in miniature: the log index is a counter and the leader's clock a constant.
struct TinyNode {
    state: Mutex<(Engine, u64)>,
}

#[tonic::async_trait]
impl Admin for TinyNode {
    async fn submit(&self, request: Request<proto::SubmitRequest>) -> Result<Response<proto::Ack>, Status> {
        let request = request.into_inner();
        let seq = request.command.as_ref().map_or(0, |c| c.seq);
        let command = match convert::command_from_submit(42, &request) {
            Ok(command) => command,
            Err(error) => return Ok(Response::new(convert::ack_refused(seq, &error))),
        };
        let mut state = self.state.lock().map_err(|_| Status::internal("poisoned"))?;
        let (engine, log_index) = &mut *state;
        *log_index += 1;
        let applied = engine.apply(&command, &mut Vec::new());
        Ok(Response::new(convert::ack(command.seq, *log_index, &applied)))
    }
}

#[tokio::test]
async fn admin_submit_over_loopback() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let address = listener.local_addr().expect("bound");
    let node = TinyNode { state: Mutex::new((Engine::default(), 0)) };
    let server = tonic::transport::Server::builder()
        .add_service(AdminServer::new(node))
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
    let server = tokio::spawn(server);

    let mut client = AdminClient::connect(format!("http://{address}")).await.expect("connect");
    let command = Command { client: ClientId(5), seq: 1, ts: 0, body: CommandBody::CreateAccount };
    let ack = client.submit(proto::SubmitRequest::from(&command)).await.expect("answered").into_inner();
    assert_eq!((ack.seq, ack.log_index, ack.duplicate), (1, 1, false));
    assert_eq!(ack.outcome, Some(proto::ack::Outcome::OkId(0)));

    let again = client.submit(proto::SubmitRequest::from(&command)).await.expect("answered").into_inner();
    assert_eq!((again.seq, again.log_index, again.duplicate), (1, 2, true));
    assert_eq!(again.outcome, ack.outcome);

    let empty = proto::SubmitRequest { client_id: 5, command: None };
    let refused = client.submit(empty).await.expect("answered").into_inner();
    let Some(proto::ack::Outcome::Rejected(info)) = refused.outcome else { panic!("refused: {refused:?}") };
    assert_eq!((refused.log_index, info.code, info.detail.as_str()), (0, 1000, "SubmitRequest.command"));

    server.abort();
}
