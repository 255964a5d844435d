import Foundation

/// Holds the fast path (`HotFrames`) to the general decoder: for any bytes, the fast
/// path may decline, but whatever it answers must be what the general path answers.
/// The contract tests and the fuzzer (Tests/Fuzz) both ask it; nothing in a service does.
public enum FastPathAudit {
    /// What the fast path got wrong about a client frame, or nil when it declined or agrees.
    public static func disagreement(clientFrame bytes: [UInt8]) -> String? {
        guard let fast = HotFrames.clientFrame(bytes) else { return nil }
        let general: InboundFrame
        switch ClientFrameDecoder().decodeGeneral(bytes) {
        case .failure(let rejection):
            return "fast path accepts what the general path refuses (\(rejection.message))"
        case .success(let frame):
            general = frame
        }
        guard fast.type == general.type, fast.requestId == general.requestId else {
            return "type or requestId differ"
        }
        guard samePayload(fast.payload, general.payload) else {
            return "payloads differ"
        }
        // What the gateway passes on (the payload's text) must read back as the same payload.
        guard let text = fast.payloadJSON else { return "no payload text" }
        let forwarded: (any ClientPayload)? = switch fast.payload {
        case is SendMessage: try? ProtocolJSON.decoder.decode(SendMessage.self, from: Data(text))
        case is DeliveryReceipt: try? ProtocolJSON.decoder.decode(DeliveryReceipt.self, from: Data(text))
        case is Ping: try? ProtocolJSON.decoder.decode(Ping.self, from: Data(text))
        default: nil
        }
        guard let forwarded, samePayload(forwarded, general.payload) else {
            return "the payload text passed on does not decode to the same payload"
        }
        return nil
    }

    /// What the fast path got wrong about a server frame, or nil when it declined or agrees.
    public static func disagreement(serverFrame bytes: [UInt8]) -> String? {
        guard let fast = HotFrames.serverFrame(bytes) else { return nil }
        guard let general = try? ServerFrameCodec.decodeGeneral(bytes) else {
            return "fast path reads a server frame the general path cannot"
        }
        guard fast.type == general.type, fast.requestId == general.requestId else {
            return "type or requestId differ"
        }
        let same = switch fast.payload {
        case let payload as MessageReceived: payload == general.payload as? MessageReceived
        case let payload as MessageAccepted: payload == general.payload as? MessageAccepted
        case let payload as MessageDelivered: payload == general.payload as? MessageDelivered
        case let payload as ErrorPayload: payload == general.payload as? ErrorPayload
        case let payload as Pong: payload == general.payload as? Pong
        default: false
        }
        return same ? nil : "server payloads differ"
    }

    /// Whether the fast path takes these bytes (client or server frame).
    public static func takesFastPath(clientFrame bytes: [UInt8]) -> Bool { HotFrames.clientFrame(bytes) != nil }
    public static func takesFastPath(serverFrame bytes: [UInt8]) -> Bool { HotFrames.serverFrame(bytes) != nil }

    private static func samePayload(_ a: any ClientPayload, _ b: any ClientPayload) -> Bool {
        switch a {
        case let payload as SendMessage: payload == b as? SendMessage
        case let payload as DeliveryReceipt: payload == b as? DeliveryReceipt
        case let payload as Ping: payload == b as? Ping
        default: false
        }
    }
}
