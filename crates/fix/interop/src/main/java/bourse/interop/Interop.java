package bourse.interop;

import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import quickfix.Application;
import quickfix.DefaultMessageFactory;
import quickfix.FieldNotFound;
import quickfix.FileStoreFactory;
import quickfix.Message;
import quickfix.ScreenLogFactory;
import quickfix.Session;
import quickfix.SessionID;
import quickfix.SessionSettings;
import quickfix.SocketInitiator;
import quickfix.field.Account;
import quickfix.field.AccountType;
import quickfix.field.ClOrdID;
import quickfix.field.ClearingBusinessDate;
import quickfix.field.MDEntryType;
import quickfix.field.MDReqID;
import quickfix.field.MDUpdateType;
import quickfix.field.MarketDepth;
import quickfix.field.MsgType;
import quickfix.field.OrdType;
import quickfix.field.OrderQty;
import quickfix.field.OrigClOrdID;
import quickfix.field.Password;
import quickfix.field.PosReqID;
import quickfix.field.PosReqType;
import quickfix.field.Price;
import quickfix.field.Side;
import quickfix.field.SubscriptionRequestType;
import quickfix.field.Symbol;
import quickfix.field.TimeInForce;
import quickfix.field.TransactTime;
import quickfix.fix44.MarketDataRequest;
import quickfix.fix44.NewOrderSingle;
import quickfix.fix44.OrderCancelReplaceRequest;
import quickfix.fix44.OrderCancelRequest;
import quickfix.fix44.PositionReport;
import quickfix.fix44.RequestForPositions;

/**
 * QuickFIX/J as a FIX 4.4 initiator against `bourse gateway run --fix`: logon with the
 * API key in Password (554), orders that rest, fill and are cancelled, a replace, a
 * dropped connection after which a fill is resent from the exchange's store, a
 * resent NewOrderSingle that must not become a second order, market data, a Day order
 * that expires when the trading day closes, a margin position read with
 * RequestForPositions, logout.
 * QuickFIX/J validates every message it receives against its FIX 4.4 data dictionary
 * (fields out of order, user-defined fields, required fields, enum values).
 *
 * Usage: Interop PORT KEY STORE_DIR. Talks to the test that runs it on stdout/stdin:
 * prints "DROPPED" after cutting the connection and waits for a line before logging on
 * again; prints "DAY" once its Day order rests and waits for a line (the test closes
 * the trading day); prints "PASS" and exits 0, or "FAIL: why" and exits 1.
 */
public final class Interop implements Application {
    private final BlockingQueue<Message> received = new LinkedBlockingQueue<>();
    private final BlockingQueue<String> events = new LinkedBlockingQueue<>();
    private final String key;
    private final java.util.List<Message> backlog = new java.util.ArrayList<>();
    private final BufferedReader test = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));

    private Interop(String key) {
        this.key = key;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3 && args.length != 5) {
            System.out.println("FAIL: usage: Interop PORT KEY STORE_DIR [TRUST_STORE_P12 PASSWORD]");
            System.exit(2);
        }
        try {
            String[] tls = args.length == 5 ? new String[] {args[3], args[4]} : null;
            new Interop(args[1]).run(Integer.parseInt(args[0]), args[2], tls);
            System.out.println("PASS");
            System.out.flush();
            System.exit(0);
        } catch (Throwable failure) {
            System.out.println("FAIL: " + failure);
            failure.printStackTrace(System.out);
            System.out.flush();
            System.exit(1);
        }
    }

    /** The session's settings; over TLS when `tls` names a PKCS#12 trust store and its password. */
    private static SessionSettings settings(int port, String store, String[] tls) throws Exception {
        // TLS: the exchange's certificate must chain to the trust store's CA and name the
        // host dialed (HTTPS endpoint identification: 127.0.0.1 as an IP SAN).
        String ssl = tls == null ? "SocketUseSSL=N" : String.join("\n",
            "SocketUseSSL=Y",
            "SocketTrustStore=" + tls[0],
            "SocketTrustStorePassword=" + tls[1],
            "TrustStoreType=PKCS12",
            "EndpointIdentificationAlgorithm=HTTPS",
            "EnabledProtocols=TLSv1.3,TLSv1.2");
        String text = String.join("\n",
            "[default]",
            "ConnectionType=initiator",
            "BeginString=FIX.4.4",
            "SenderCompID=QFJ",
            "TargetCompID=BOURSE",
            "SocketConnectHost=127.0.0.1",
            "SocketConnectPort=" + port,
            ssl,
            "HeartBtInt=5",
            "ReconnectInterval=1",
            "NonStopSession=Y",
            "FileStorePath=" + store,
            "UseDataDictionary=Y",
            "DataDictionary=FIX44.xml",
            "ValidateFieldsOutOfOrder=Y",
            "ValidateFieldsHaveValues=Y",
            "ValidateUserDefinedFields=Y",
            "ValidateIncomingMessage=Y",
            "ValidateUnorderedGroupFields=Y",
            "CheckLatency=Y",
            "ResetOnLogon=N",
            "ScreenLogShowIncoming=Y",
            "ScreenLogShowOutgoing=Y",
            "ScreenLogShowEvents=Y",
            "[session]",
            "");
        return new SessionSettings(new ByteArrayInputStream(text.getBytes(StandardCharsets.UTF_8)));
    }

    private void run(int port, String store, String[] tls) throws Exception {
        SessionSettings settings = settings(port, store, tls);
        SocketInitiator initiator = start(settings);
        SessionID id = initiator.getSessions().get(0);
        expectEvent("logon");

        // A buy that rests.
        send(id, order("B1", "1", Side.BUY, 10, 150));
        Message b1 = expect("8", "B1");
        check(b1, 150, "0");
        check(b1, 39, "0");
        check(b1, 151, "10");
        String b1Order = b1.getString(37);

        // A sell that takes 4 of it: New and Fill for the sell, a partial fill for the buy.
        send(id, order("S1", "0", Side.SELL, 4, 150));
        check(expect("8", "S1"), 150, "0");
        Message s1Fill = expect("8", "S1");
        check(s1Fill, 150, "F");
        check(s1Fill, 39, "2");
        Message b1Fill = expect("8", "B1");
        check(b1Fill, 150, "F");
        check(b1Fill, 39, "1");
        check(b1Fill, 14, "4");
        check(b1Fill, 151, "6");
        check(b1Fill, 6, "150");
        check(b1Fill, 37, b1Order);

        // Replace: a smaller quantity (the order keeps its place in the queue).
        OrderCancelReplaceRequest replace = new OrderCancelReplaceRequest(new OrigClOrdID("B1"), new ClOrdID("B2"),
            new Side(Side.BUY), new TransactTime(), new OrdType(OrdType.LIMIT));
        replace.set(new Account("1"));
        replace.set(new Symbol("ACME/USD"));
        replace.set(new OrderQty(8));
        replace.set(new Price(150));
        send(id, replace);
        Message replaced = expect("8", "B2");
        check(replaced, 150, "5");
        check(replaced, 41, "B1");
        check(replaced, 38, "8");
        check(replaced, 151, "4");
        check(replaced, 37, b1Order);

        // Cancel what is left.
        OrderCancelRequest cancel = new OrderCancelRequest(new OrigClOrdID("B2"), new ClOrdID("B3"),
            new Side(Side.BUY), new TransactTime());
        cancel.set(new Symbol("ACME/USD"));
        cancel.set(new OrderQty(8));
        send(id, cancel);
        Message cancelled = expect("8", "B3");
        check(cancelled, 150, "4");
        check(cancelled, 39, "4");
        check(cancelled, 151, "0");
        check(cancelled, 14, "4");

        // A buy that rests, then the connection drops without a Logout.
        send(id, order("B4", "1", Side.BUY, 5, 140));
        Message b4 = expect("8", "B4");
        check(b4, 150, "0");
        String b4Order = b4.getString(37);
        Session.lookupSession(id).disconnect("interop: dropping the connection", false);
        initiator.stop(true);
        expectEvent("logout");
        System.out.println("DROPPED");
        System.out.flush();
        // The test sells into B4 while this side is away, then says go.
        test.readLine();

        // Logon again from the file store: the exchange's Logon is ahead, QuickFIX/J asks
        // for a resend, and the fill comes again with PossDupFlag=Y.
        initiator = start(settings);
        expectEvent("logon");
        Message b4Fill = expect("8", "B4");
        check(b4Fill, 150, "F");
        check(b4Fill, 39, "2");
        check(b4Fill, 37, b4Order);
        if (!b4Fill.getHeader().isSetField(43) || !b4Fill.getHeader().getBoolean(43)) {
            throw new AssertionError("the resent fill has no PossDupFlag=Y: " + b4Fill);
        }

        // Unsure whether B4 went in, the client sends it again: its status, no new order.
        send(id, order("B4", "1", Side.BUY, 5, 140));
        Message status = expect("8", "B4");
        check(status, 150, "I");
        check(status, 39, "2");
        check(status, 37, b4Order);

        // Market data: a snapshot, then an incremental refresh for a new offer.
        MarketDataRequest request = new MarketDataRequest(new MDReqID("md1"),
            new SubscriptionRequestType(SubscriptionRequestType.SNAPSHOT_UPDATES), new MarketDepth(0));
        request.set(new MDUpdateType(MDUpdateType.INCREMENTAL_REFRESH));
        for (char type : new char[] {MDEntryType.BID, MDEntryType.OFFER}) {
            MarketDataRequest.NoMDEntryTypes entry = new MarketDataRequest.NoMDEntryTypes();
            entry.set(new MDEntryType(type));
            request.addGroup(entry);
        }
        MarketDataRequest.NoRelatedSym symbol = new MarketDataRequest.NoRelatedSym();
        symbol.set(new Symbol("ACME/USD"));
        request.addGroup(symbol);
        send(id, request);
        Message snapshot = expect("W", null);
        check(snapshot, 262, "md1");
        check(snapshot, 55, "ACME/USD");
        send(id, order("S2", "0", Side.SELL, 1, 160));
        check(expect("8", "S2"), 150, "0");
        Message update = expect("X", null);
        quickfix.Group entry = update.getGroup(1, new quickfix.fix44.MarketDataIncrementalRefresh.NoMDEntries());
        if (!"0".equals(entry.getString(279)) || !"1".equals(entry.getString(269)) || !"160".equals(entry.getString(270))) {
            throw new AssertionError("expected a new offer at 160: " + update);
        }

        // A Day order rests until the test closes the trading day: then it expires.
        NewOrderSingle day = order("D1", "1", Side.BUY, 3, 100);
        day.set(new TimeInForce(TimeInForce.DAY));
        send(id, day);
        Message d1 = expect("8", "D1");
        check(d1, 150, "0");
        check(d1, 59, "0");
        System.out.println("DAY");
        System.out.flush();
        test.readLine();
        Message expired = expect("8", "D1");
        check(expired, 150, "C");
        check(expired, 39, "C");
        check(expired, 151, "0");
        check(expired, 14, "0");
        check(expired, 37, d1.getString(37));

        // Positions: a margin trade in FUT/USD between accounts 0 and 1 (after the close of
        // the day, which would settle it), then RequestForPositions: the
        // RequestForPositionsAck and the PositionReport must pass the dictionary (required
        // fields, enum values, the NoPositions and NoPosAmt groups).
        send(id, order("F1", "0", Side.SELL, 2, 100, "FUT/USD"));
        check(expect("8", "F1"), 150, "0");
        send(id, order("F2", "1", Side.BUY, 2, 100, "FUT/USD"));
        check(expect("8", "F2"), 150, "0");
        check(expect("8", "F2"), 150, "F");
        check(expect("8", "F1"), 150, "F");
        RequestForPositions positions = new RequestForPositions(new PosReqID("pos1"),
            new PosReqType(PosReqType.POSITIONS), new Account("1"),
            new AccountType(AccountType.ACCOUNT_IS_CARRIED_ON_CUSTOMER_SIDE_OF_THE_BOOKS),
            new ClearingBusinessDate("20260102"), new TransactTime());
        send(id, positions);
        Message ack = expect("AO", null);
        check(ack, 710, "pos1");
        check(ack, 727, "1");
        check(ack, 728, "0");
        check(ack, 729, "0");
        Message report = expect("AP", null);
        check(report, 710, "pos1");
        check(report, 715, "20260102");
        check(report, 1, "1");
        check(report, 55, "FUT/USD");
        check(report, 730, "100");
        check(report, 731, "2");
        check(report, 734, "100");
        quickfix.Group quantity = report.getGroup(1, new PositionReport.NoPositions());
        check(quantity, 703, "FIN");
        check(quantity, 704, "2");
        check(quantity, 705, "0");
        quickfix.Group unrealized = report.getGroup(1, new PositionReport.NoPosAmt());
        check(unrealized, 707, "FMTM");
        check(unrealized, 708, "0");
        quickfix.Group realized = report.getGroup(2, new PositionReport.NoPosAmt());
        check(realized, 707, "CASH");
        check(realized, 708, "0");

        // Logout.
        initiator.stop();
        expectEvent("logout");
    }

    private SocketInitiator start(SessionSettings settings) throws Exception {
        SocketInitiator initiator = new SocketInitiator(this, new FileStoreFactory(settings), settings,
            new ScreenLogFactory(settings), new DefaultMessageFactory());
        initiator.start();
        return initiator;
    }

    private static NewOrderSingle order(String clOrdId, String account, char side, int qty, int px) {
        return order(clOrdId, account, side, qty, px, "ACME/USD");
    }

    private static NewOrderSingle order(String clOrdId, String account, char side, int qty, int px, String symbol) {
        NewOrderSingle order = new NewOrderSingle(new ClOrdID(clOrdId), new Side(side), new TransactTime(),
            new OrdType(OrdType.LIMIT));
        order.set(new Account(account));
        order.set(new Symbol(symbol));
        order.set(new OrderQty(qty));
        order.set(new Price(px));
        order.set(new TimeInForce(TimeInForce.GOOD_TILL_CANCEL));
        return order;
    }

    private static void send(SessionID id, Message message) throws Exception {
        if (!Session.sendToTarget(message, id)) {
            throw new AssertionError("not sent: " + message);
        }
    }

    /**
     * The first application message of this type (and ClOrdID, when given), in the order
     * received; messages it passes over stay for later calls (the reports of the two
     * sides of a trade may come in either order).
     */
    private Message expect(String msgType, String clOrdId) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        while (true) {
            for (java.util.Iterator<Message> it = backlog.iterator(); it.hasNext();) {
                Message message = it.next();
                String type = message.getHeader().getString(MsgType.FIELD);
                if (type.equals(msgType) && (clOrdId == null || clOrdId.equals(message.getString(11)))) {
                    it.remove();
                    return message;
                }
            }
            long left = deadline - System.nanoTime();
            Message message = received.poll(Math.max(left, 0), TimeUnit.NANOSECONDS);
            if (message == null) {
                throw new AssertionError("no " + msgType + " for " + clOrdId + " within 15 s");
            }
            String type = message.getHeader().getString(MsgType.FIELD);
            if (type.equals("3") || type.equals("j") || type.equals("9") && !msgType.equals("9")) {
                throw new AssertionError("refused: " + message);
            }
            backlog.add(message);
        }
    }

    private void expectEvent(String event) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        while (true) {
            String got = events.poll(Math.max(deadline - System.nanoTime(), 0), TimeUnit.NANOSECONDS);
            if (got == null) {
                throw new AssertionError("no " + event + " within 15 s");
            }
            if (got.equals(event)) {
                return;
            }
        }
    }

    private static void check(quickfix.FieldMap message, int tag, String expected) throws FieldNotFound {
        String got = message.getString(tag);
        if (!got.equals(expected)) {
            throw new AssertionError("tag " + tag + " is " + got + ", expected " + expected + " in " + message);
        }
    }

    @Override
    public void onCreate(SessionID id) {
    }

    @Override
    public void onLogon(SessionID id) {
        events.add("logon");
    }

    @Override
    public void onLogout(SessionID id) {
        events.add("logout");
    }

    @Override
    public void toAdmin(Message message, SessionID id) {
        try {
            if (MsgType.LOGON.equals(message.getHeader().getString(MsgType.FIELD))) {
                message.setField(new Password(key));
            }
        } catch (FieldNotFound impossible) {
            throw new IllegalStateException(impossible);
        }
    }

    @Override
    public void fromAdmin(Message message, SessionID id) {
        try {
            String type = message.getHeader().getString(MsgType.FIELD);
            if (type.equals("3")) {
                received.add(message);
            }
        } catch (FieldNotFound ignored) {
            // A message without MsgType never gets this far.
        }
    }

    @Override
    public void toApp(Message message, SessionID id) {
    }

    @Override
    public void fromApp(Message message, SessionID id) {
        received.add(message);
    }
}
