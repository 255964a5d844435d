import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOWebSocket

/// The WebSocket framing of the gateway's client sockets (RFC 6455, section 5), read and
/// written by `SocketHandler` itself: no decoder, encoder or error handler of their own in
/// each socket's pipeline, and a server frame leaves as one buffer, its header written
/// in front of the payload.
enum WebSocketWire {
    /// One frame a client sent, its payload unmasked.
    struct ClientFrame {
        var fin: Bool
        var opcode: WebSocketOpcode
        var payload: [UInt8]
    }

    /// Why a client's bytes cannot be read as frames; the socket closes with `code`.
    struct Refusal: Error, Equatable {
        let code: WebSocketErrorCode
        let reason: String

        static let unmasked = Refusal(code: .protocolError, reason: "client frames must be masked and use no extension bits")
        static let unknownOpcode = Refusal(code: .protocolError, reason: "unknown opcode")
        static let badControlFrame = Refusal(code: .protocolError, reason: "a control frame must be whole and at most 125 bytes")
        static let tooLarge = Refusal(code: .messageTooLarge, reason: "message too large")
    }

    /// Reads the next whole frame from the front of `buffer` and moves past it; nil
    /// (nothing moved) while its bytes have not all come. Every check is made on the
    /// header, before any of the payload is waited for: a frame longer than
    /// `maxPayload` is refused as soon as its length is read.
    static func nextClientFrame(_ buffer: inout ByteBuffer, maxPayload: Int) throws(Refusal) -> ClientFrame? {
        guard let first = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self),
              let second = buffer.getInteger(at: buffer.readerIndex + 1, as: UInt8.self)
        else { return nil }
        let fin = first & 0x80 != 0
        guard first & 0x70 == 0, second & 0x80 != 0 else { throw .unmasked }
        guard let opcode = WebSocketOpcode(encodedWebSocketOpcode: first & 0x0F), known.contains(opcode) else {
            throw .unknownOpcode
        }
        var headerLength = 2
        var length = UInt64(second & 0x7F)
        if opcode.isControlOpcode, !fin || length > 125 { throw .badControlFrame }
        if length == 126 {
            guard let extended = buffer.getInteger(at: buffer.readerIndex + 2, as: UInt16.self) else { return nil }
            length = UInt64(extended)
            headerLength += 2
        } else if length == 127 {
            guard let extended = buffer.getInteger(at: buffer.readerIndex + 2, as: UInt64.self) else { return nil }
            length = extended
            headerLength += 8
        }
        guard length <= UInt64(maxPayload) else { throw .tooLarge }
        let count = Int(length)
        guard let mask = buffer.getBytes(at: buffer.readerIndex + headerLength, length: 4),
              buffer.readableBytes - headerLength - 4 >= count
        else { return nil }
        buffer.moveReaderIndex(forwardBy: headerLength + 4)
        let payload = buffer.withUnsafeReadableBytes { masked in
            [UInt8](unsafeUninitializedCapacity: count) { bytes, initialized in
                for index in 0..<count { bytes[index] = masked[index] ^ mask[index & 3] }
                initialized = count
            }
        }
        buffer.moveReaderIndex(forwardBy: count)
        return ClientFrame(fin: fin, opcode: opcode, payload: payload)
    }

    private static let known: [WebSocketOpcode] = [.continuation, .text, .binary, .connectionClose, .ping, .pong]

    /// A whole server frame (unmasked, FIN set) carrying `payload`, in one buffer.
    static func serverFrame<Bytes: Collection<UInt8>>(_ opcode: WebSocketOpcode, _ payload: Bytes, allocator: ByteBufferAllocator) -> ByteBuffer {
        let count = payload.count
        var buffer = allocator.buffer(capacity: count + (count < 126 ? 2 : count <= 0xFFFF ? 4 : 10))
        buffer.writeInteger(UInt8(0x80) | UInt8(webSocketOpcode: opcode))
        if count < 126 {
            buffer.writeInteger(UInt8(count))
        } else if count <= 0xFFFF {
            buffer.writeInteger(UInt8(126))
            buffer.writeInteger(UInt16(count))
        } else {
            buffer.writeInteger(UInt8(127))
            buffer.writeInteger(UInt64(count))
        }
        buffer.writeBytes(payload)
        return buffer
    }

    /// A close frame with `code` and `reason` (its first 123 bytes: a control frame has
    /// room for 125; the gateway's reasons are ASCII).
    static func closeFrame(_ code: WebSocketErrorCode, reason: String, allocator: ByteBufferAllocator) -> ByteBuffer {
        var payload = allocator.buffer(capacity: 2 + min(reason.utf8.count, 123))
        payload.write(webSocketErrorCode: code)
        payload.writeBytes(reason.utf8.prefix(123))
        return serverFrame(.connectionClose, payload.readableBytesView, allocator: allocator)
    }
}

/// The upgrade to a client socket (RFC 6455, section 4.2): checks the request's key and
/// version, answers with the key's accept value, and hands the connection to
/// `upgradePipelineHandler` as it is, with no WebSocket handlers of NIO's added to it
/// (`SocketHandler` reads and writes the frames itself, `WebSocketWire`).
struct SocketUpgrader<UpgradeResult: Sendable>: NIOTypedHTTPServerProtocolUpgrader {
    let supportedProtocol = "websocket"
    let requiredUpgradeHeaders: [String] = []
    /// The extra headers of the answer, or nil to refuse the upgrade (the request then
    /// goes on as plain HTTP).
    let shouldUpgrade: @Sendable (any Channel, HTTPRequestHead) -> EventLoopFuture<HTTPHeaders?>
    let upgradePipelineHandler: @Sendable (any Channel, HTTPRequestHead) -> EventLoopFuture<UpgradeResult>

    /// Appended to the client's key before hashing (RFC 6455, section 1.3).
    static var acceptGUID: String { "258EAFA5-E914-47DA-95CA-C5AB0DC85B11" }

    /// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
    static func acceptValue(forKey key: String) -> String {
        Data(Insecure.SHA1.hash(data: Array((key + acceptGUID).utf8))).base64EncodedString()
    }

    func buildUpgradeResponse(channel: any Channel, upgradeRequest: HTTPRequestHead, initialResponseHeaders: HTTPHeaders) -> EventLoopFuture<HTTPHeaders> {
        let keys = upgradeRequest.headers[canonicalForm: "Sec-WebSocket-Key"]
        let versions = upgradeRequest.headers[canonicalForm: "Sec-WebSocket-Version"]
        guard keys.count == 1, let key = keys.first, versions.count == 1, versions.first == "13" else {
            return channel.eventLoop.makeFailedFuture(NIOWebSocketUpgradeError.invalidUpgradeHeader)
        }
        let accept = Self.acceptValue(forKey: String(key))
        return shouldUpgrade(channel, upgradeRequest).flatMapThrowing { extra in
            guard var headers = extra else { throw NIOWebSocketUpgradeError.unsupportedWebSocketTarget }
            headers.replaceOrAdd(name: "Upgrade", value: "websocket")
            headers.add(name: "Sec-WebSocket-Accept", value: accept)
            headers.replaceOrAdd(name: "Connection", value: "upgrade")
            return headers
        }
    }

    func upgrade(channel: any Channel, upgradeRequest: HTTPRequestHead) -> EventLoopFuture<UpgradeResult> {
        upgradePipelineHandler(channel, upgradeRequest)
    }
}
