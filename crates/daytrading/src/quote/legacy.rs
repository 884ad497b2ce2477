//! The legacy quote server's wire format (spec 7.3), both sides: the `legacy-tcp`
//! source's client and the emulator's optional TCP endpoint.
//!
//! One request per connection: the client sends `SYM,userid` + LF (the emulator also
//! takes `SYM,userid,n`), the server answers `price,SYM,userid,timestamp,cryptokey` + LF
//! (dollars with two decimals, ms since the epoch) and closes. An invalid request is
//! answered with userid `NA` and price `0.00`. The client waits `timeout` for an attempt,
//! doubling it each retry, `attempts` times.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bourse_engine::daytrading::{
    amount_parse, cents_format, userid_valid, DtQuote, QuoteSource, Sym, CRYPTOKEY_LEN_MAX,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::emulator::Emulator;
use super::Clock;

/// Longest line either side reads.
const LINE_BYTES_MAX: usize = 1_024;

/// Asks a legacy server for a quote of `symbol` for `userid`, with retries.
pub async fn fetch(
    address: &str,
    symbol: Sym,
    userid: &str,
    timeout: Duration,
    attempts: u32,
) -> Result<DtQuote, String> {
    let mut wait = timeout;
    let mut last = String::from("no attempt");
    for _ in 0..attempts.max(1) {
        match tokio::time::timeout(wait, ask(address, symbol, userid)).await {
            Ok(Ok(quote)) => return Ok(quote),
            Ok(Err(error)) => last = error,
            Err(_) => last = format!("no answer within {wait:?}"),
        }
        wait = wait.saturating_mul(2);
    }
    Err(format!("legacy quote server {address}: {last}"))
}

async fn ask(address: &str, symbol: Sym, userid: &str) -> Result<DtQuote, String> {
    let mut stream = TcpStream::connect(address).await.map_err(|e| e.to_string())?;
    stream.write_all(format!("{symbol},{userid}\n").as_bytes()).await.map_err(|e| e.to_string())?;
    let mut line = String::new();
    let mut reader = BufReader::new(stream).take(LINE_BYTES_MAX as u64);
    reader.read_line(&mut line).await.map_err(|e| e.to_string())?;
    parse_reply(&line)
}

use tokio::io::AsyncReadExt as _;

/// `price,SYM,userid,timestamp,cryptokey`.
pub fn parse_reply(line: &str) -> Result<DtQuote, String> {
    let line = line.trim_end_matches(['\n', '\r']);
    let mut parts = line.splitn(5, ',');
    let mut next = |what: &str| parts.next().ok_or_else(|| format!("reply {line:?} has no {what}"));
    let price = next("price")?;
    let symbol = next("symbol")?;
    let userid = next("userid")?;
    let time = next("timestamp")?;
    let cryptokey = next("cryptokey")?;
    let price =
        amount_parse(price).ok_or_else(|| format!("reply {line:?}: price {price:?} is not a positive amount"))?;
    let symbol = Sym::parse(symbol).ok_or_else(|| format!("reply {line:?}: bad symbol"))?;
    let quote_server_time = time.parse().map_err(|_| format!("reply {line:?}: bad timestamp"))?;
    if cryptokey.len() > CRYPTOKEY_LEN_MAX
        || cryptokey.chars().any(char::is_control)
        || userid.chars().any(char::is_control)
    {
        return Err(format!("reply {line:?}: cryptokey or userid unusable"));
    }
    Ok(DtQuote {
        symbol,
        price,
        userid: userid.to_owned(),
        quote_server_time,
        cryptokey: cryptokey.to_owned(),
        source: QuoteSource::LegacyTcp,
        transaction_num: 0,
    })
}

/// The emulator's TCP endpoint.
pub struct LegacyServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl LegacyServer {
    pub async fn start(listen: SocketAddr, emulator: Arc<Emulator>, clock: Clock) -> std::io::Result<LegacyServer> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let emulator = Arc::clone(&emulator);
                let clock = clock.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(Duration::from_secs(30), serve(stream, &emulator, &clock)).await;
                });
            }
        });
        Ok(LegacyServer { addr, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for LegacyServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(stream: TcpStream, emulator: &Emulator, clock: &Clock) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    BufReader::new(read).take(LINE_BYTES_MAX as u64).read_line(&mut line).await?;
    let line = line.trim_end_matches(['\n', '\r']);
    let mut parts = line.split(',');
    let symbol = parts.next().and_then(Sym::parse);
    let userid = parts.next().filter(|u| userid_valid(u));
    let n = match parts.next() {
        None => Some(0),
        Some(n) => n.parse::<u64>().ok(),
    };
    let reply = match (symbol, userid, n, parts.next()) {
        (Some(symbol), Some(userid), Some(n), None) => {
            let answer = emulator.answer(symbol, userid, n);
            tokio::time::sleep(answer.delay).await;
            format!("{},{symbol},{userid},{},{}\n", cents_format(answer.price), clock.now_ms(n), answer.cryptokey)
        }
        _ => {
            let symbol = line.split(',').next().unwrap_or_default().chars().take(3).collect::<String>();
            format!("0.00,{symbol},NA,{},\n", clock.now_ms(0))
        }
    };
    write.write_all(reply.as_bytes()).await?;
    write.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_endpoint_answers_the_wire_format_and_the_client_reads_it() {
        let emulator = Arc::new(Emulator::new(super::super::emulator::EmulatorConfig::default()).unwrap());
        let server = LegacyServer::start(
            "127.0.0.1:0".parse().unwrap(),
            Arc::clone(&emulator),
            Clock::Virtual { t0_ms: 1_000, step_ms: 10 },
        )
        .await
        .unwrap();
        let address = server.addr().to_string();
        // SYM,userid is n = 0: the first answer for (S, 0).
        let quote = fetch(&address, Sym::parse("S").unwrap(), "alice", Duration::from_millis(500), 3).await.unwrap();
        let expected = emulator.answer_at(Sym::parse("S").unwrap(), "alice", 0, 0);
        assert_eq!((quote.price, quote.cryptokey.as_str()), (expected.price, expected.cryptokey.as_str()));
        assert_eq!(quote.quote_server_time, 1_000);
        assert_eq!(quote.source, QuoteSource::LegacyTcp);
        // A bad request gets NA; an unreachable server fails after its attempts.
        let mut stream = TcpStream::connect(&address).await.unwrap();
        stream.write_all(b"s,alice\n").await.unwrap();
        let mut reply = String::new();
        BufReader::new(stream).read_line(&mut reply).await.unwrap();
        assert!(reply.starts_with("0.00,s,NA,"), "{reply}");
        assert!(parse_reply(&reply).is_err());
        drop(server);
        let closed = fetch(&address, Sym::parse("S").unwrap(), "a", Duration::from_millis(5), 2).await;
        assert!(closed.is_err());
        assert_eq!(parse_reply("12.50,ABC,bob,1700000000000,k+/=\n").unwrap().price, 1_250);
    }
}
