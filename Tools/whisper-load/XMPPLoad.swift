import Foundation
import NIOCore
import NIOWebSocket

/// `whisper-load --xmpp URL`: the message job against an XMPP server over WebSocket (RFC
/// 7395): pairs of users `u1`... exchange `<message type='chat'>` stanzas of a `send_message`
/// frame's size asking for XEP-0184 receipts, on Whisper's pace and window, latency to the
/// recipient's check (docs/benchmarks.md, "Side by side with ejabberd").
struct XMPPLoad {
    let url: String
    let domain: String
    let password: String
    let pairs: Int
    /// The size in bytes each message stanza is padded to.
    let stanzaBytes: Int

    /// Opens and signs in every user's socket (recipients first), then starts the
    /// senders; returns the channels, to close once the run is over.
    func open(
        perSender: Double, arrivals: Arrivals, window: Int, measureFrom: ContinuousClock.Instant, end: ContinuousClock.Instant,
        stats: Stats, on eventLoop: any EventLoop
    ) async throws -> [any Channel] {
        var channels: [any Channel] = []
        for index in 0..<pairs {
            let user = XMPPUser(name: "u\(2 * index + 2)", domain: domain, password: password)
            let peer = "u\(2 * index + 1)@\(domain)"
            channels.append(try await LoadSocket.open(url: url, subprotocol: "xmpp", on: eventLoop) { bound in
                XMPPSocketHandler(user: user, role: .recipient(peer: peer, measureFrom: measureFrom), stats: stats, bound: bound)
            })
        }
        for index in 0..<pairs {
            let user = XMPPUser(name: "u\(2 * index + 1)", domain: domain, password: password)
            let pace = SendPace(perSecond: perSender, phase: Double(index) / Double(pairs), arrivals: arrivals, window: window, end: end)
            let role = XMPPSocketHandler.Role.sender(peer: "u\(2 * index + 2)@\(domain)", pace: pace, stanzaBytes: stanzaBytes)
            channels.append(try await LoadSocket.open(url: url, subprotocol: "xmpp", on: eventLoop) { bound in
                XMPPSocketHandler(user: user, role: role, stats: stats, bound: bound)
            })
        }
        return channels
    }
}

struct XMPPUser: Sendable {
    var name: String
    var domain: String
    var password: String
    var jid: String { "\(name)@\(domain)" }
}

/// One XMPP user on its WebSocket: stream, SASL PLAIN, bind, presence, then sends or
/// answers on its event loop. Each WebSocket message is one element (RFC 7395 section 3.3),
/// so stanzas are told apart by their start and read with plain string searches.
private final class XMPPSocketHandler: ChannelInboundHandler, PacedSender {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    enum Role: Sendable {
        case sender(peer: String, pace: SendPace, stanzaBytes: Int)
        case recipient(peer: String, measureFrom: ContinuousClock.Instant)
    }

    private enum Stage {
        case opening, authenticating, reopening, binding, ready
    }

    let user: XMPPUser
    let role: Role
    let stats: Stats
    let bound: EventLoopPromise<Void>
    private var stage = Stage.opening
    var messages = WebSocketMessages()

    // Sender state.
    let pace: SendPace
    var paceState = PaceState()
    private var waiting: Set<String> = []
    private var counter = 0
    var unanswered: Int { waiting.count }

    init(user: XMPPUser, role: Role, stats: Stats, bound: EventLoopPromise<Void>) {
        self.user = user
        self.role = role
        self.stats = stats
        self.bound = bound
        if case .sender(_, let pace, _) = role {
            self.pace = pace
        } else {
            pace = SendPace(perSecond: 0, phase: 0, arrivals: .even, window: 0, end: .now)
        }
    }

    func handlerAdded(context: ChannelHandlerContext) {
        openStream(context: context)
    }

    private func openStream(context: ChannelHandlerContext) {
        write("<open xmlns='urn:ietf:params:xml:ns:xmpp-framing' to='\(user.domain)' version='1.0'/>", context: context)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if let message = messages.read(unwrapInboundIn(data), context: context) {
            handle(String(buffer: message), context: context)
        }
    }

    private func handle(_ element: String, context: ChannelHandlerContext) {
        switch stage {
        case .opening where element.contains("features") && element.contains("mechanisms"):
            // SASL PLAIN (RFC 4616): authorization identity empty, then the user and password.
            let credentials = Data(([0] + Array(user.name.utf8) + [0] + Array(user.password.utf8))).base64EncodedString()
            write("<auth xmlns='urn:ietf:params:xml:ns:xmpp-sasl' mechanism='PLAIN'>\(credentials)</auth>", context: context)
            stage = .authenticating
        case .authenticating where element.hasPrefix("<success"):
            stage = .reopening
            openStream(context: context)
        case .authenticating where element.hasPrefix("<failure"):
            fail("the XMPP server refused \(user.jid)'s password", context: context)
        case .reopening where element.contains("features"):
            write(
                "<iq type='set' id='bind'><bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'><resource>load</resource></bind></iq>",
                context: context
            )
            stage = .binding
        case .binding where element.hasPrefix("<iq") && (element.contains("'bind'") || element.contains("\"bind\"")):
            guard element.contains("result") else {
                fail("the XMPP server did not bind a resource for \(user.jid)", context: context)
                return
            }
            write("<presence/>", context: context)
            stage = .ready
            bound.succeed()
            if case .sender = role { startSending(context: context) }
        case .ready where element.hasPrefix("<message"):
            message(element, context: context)
        case _ where element.hasPrefix("<close"):
            context.close(promise: nil)
        default:
            break
        }
    }

    private func message(_ stanza: String, context: ChannelHandlerContext) {
        switch role {
        case .sender:
            // A receipt: <message ...><received xmlns='urn:xmpp:receipts' id='...'/></message>.
            guard let received = stanza.range(of: "<received"),
                  let id = Self.attribute("id", in: stanza[received.upperBound...]),
                  waiting.remove(String(id)) != nil else { return }
            answered(context: context)
        case .recipient(let peer, let measureFrom):
            guard let id = Self.attribute("id", in: stanza[...]),
                  let bodyStart = stanza.range(of: "<body>"), let bodyEnd = stanza.range(of: "</body>", range: bodyStart.upperBound..<stanza.endIndex)
            else {
                stats.failed("unreadable XMPP message")
                return
            }
            let from = Self.attribute("from", in: stanza[...])
            guard from.map({ $0 == peer || $0.hasPrefix(peer + "/") }) == true else {
                stats.failed("XMPP message from someone else")
                return
            }
            stats.received(xmppId: String(id), body: stanza[bodyStart.upperBound..<bodyEnd.lowerBound], measure: ContinuousClock.now >= measureFrom)
            write("<message to='\(peer)' id='r\(id)'><received xmlns='urn:xmpp:receipts' id='\(id)'/></message>", context: context)
        }
    }

    func sendOne(context: ChannelHandlerContext) {
        guard case .sender(let peer, _, let stanzaBytes) = role else { return }
        counter += 1
        let id = "\(user.name)-\(counter)"
        let head = "<message to='\(peer)' id='\(id)' type='chat'><body>"
        let tail = "</body><request xmlns='urn:xmpp:receipts'/></message>"
        let stamp = "\(id) "
        let padding = max(0, stanzaBytes - head.utf8.count - tail.utf8.count - stamp.utf8.count)
        let body = stamp + String(repeating: "x", count: padding)
        stats.sending(xmppId: id, body: body)
        waiting.insert(id)
        write(head + body + tail, context: context)
    }

    /// The value of attribute `name` in the first element of `text` (quoted either way).
    static func attribute(_ name: String, in text: Substring) -> Substring? {
        let elementEnd = text.firstIndex(of: ">") ?? text.endIndex
        let element = text[..<elementEnd]
        for quote in ["'", "\""] {
            if let start = element.range(of: " \(name)=\(quote)") {
                let rest = element[start.upperBound...]
                if let close = rest.firstIndex(of: Character(quote)) { return rest[..<close] }
            }
        }
        return nil
    }

    private func fail(_ why: String, context: ChannelHandlerContext) {
        bound.fail(LoadFailure(why))
        context.close(promise: nil)
    }

    private func write(_ text: String, context: ChannelHandlerContext) {
        WebSocketMessages.write(context.channel.allocator.buffer(string: text), context: context)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
