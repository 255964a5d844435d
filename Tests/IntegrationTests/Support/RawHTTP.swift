import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// A bare HTTP/1.1 client on one TCP connection, for what client libraries hide: it
/// can write a whole request body before it reads anything (as Python's urllib does),
/// connect from a chosen loopback address, and keep an upgraded socket open.
enum RawHTTP {
    struct Answer: Sendable {
        var status: Int
        var headers: [String: String]
        var body: [UInt8]
        /// The connection, still open (an upgraded WebSocket, for example).
        var channel: Channel

        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:] }
        var errorCode: String? { (json["error"] as? [String: Any])?["code"] as? String }
    }

    /// Collects bytes until a whole answer (head and, when it declares one,
    /// `Content-Length` bytes of body) has come, or the connection closes.
    final class Collector: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let answer: EventLoopPromise<(head: String, body: [UInt8])>
        /// What came so far, and whether the answer was given (a promise completes once).
        private let state = Mutex<(bytes: [UInt8], done: Bool)>(([], false))

        init(answer: EventLoopPromise<(head: String, body: [UInt8])>) {
            self.answer = answer
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            let whole = state.withLock { state -> (head: String, body: [UInt8])? in
                state.bytes += Array(buffer.readableBytesView)
                guard !state.done, let whole = Self.whole(state.bytes) else { return nil }
                state.done = true
                return whole
            }
            if let whole { answer.succeed(whole) }
        }

        func channelInactive(context: ChannelHandlerContext) {
            let rest = state.withLock { state -> (head: String, body: [UInt8])? in
                guard !state.done else { return nil }
                state.done = true
                return Self.whole(state.bytes) ?? (String(decoding: state.bytes, as: UTF8.self), [])
            }
            if let rest { answer.succeed(rest) }
        }

        static func whole(_ bytes: [UInt8]) -> (head: String, body: [UInt8])? {
            let separator: [UInt8] = Array("\r\n\r\n".utf8)
            guard bytes.count >= 4, let end = (0...(bytes.count - 4)).first(where: { Array(bytes[$0..<($0 + 4)]) == separator }) else {
                return nil
            }
            let head = String(decoding: bytes[..<end], as: UTF8.self)
            let body = Array(bytes[(end + 4)...])
            let length = head.split(separator: "\r\n").compactMap { line -> Int? in
                let parts = line.split(separator: ":", maxSplits: 1)
                guard parts.count == 2, parts[0].lowercased() == "content-length" else { return nil }
                return Int(parts[1].trimmingCharacters(in: .whitespaces))
            }.first
            if head.hasPrefix("HTTP/1.1 101") { return (head, []) }
            guard let length, body.count >= length else { return nil }
            return (head, Array(body.prefix(length)))
        }
    }

    /// Sends `head` (request line and headers, without the blank line) and then `body`
    /// in full before waiting for the answer; from `source` when given (a 127.x address).
    static func exchange(port: Int, head: String, body: [UInt8] = [], from source: String? = nil) async throws -> Answer {
        let promise = MultiThreadedEventLoopGroup.singleton.any().makePromise(of: (head: String, body: [UInt8]).self)
        var bootstrap = ClientBootstrap(group: promise.futureResult.eventLoop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Collector(answer: promise)) }
            }
        if let source { bootstrap = bootstrap.bind(to: try SocketAddress(ipAddress: source, port: 0)) }
        let channel = try await bootstrap.connect(host: "127.0.0.1", port: port).get()
        // A server that neither reads nor answers would hold this forever: the connection
        // is closed after a while, which ends the writes and yields what came (status 0).
        let giveUp = channel.eventLoop.scheduleTask(in: .seconds(30)) { channel.close(promise: nil) }
        promise.futureResult.whenComplete { _ in giveUp.cancel() }
        try await channel.writeAndFlush(channel.allocator.buffer(string: head + "\r\n\r\n"))
        var offset = 0
        while offset < body.count {
            let end = min(body.count, offset + 65_536)
            do {
                try await channel.writeAndFlush(channel.allocator.buffer(bytes: body[offset..<end]))
            } catch {
                break // closed by the server (or given up): read what it said
            }
            offset = end
        }
        let (answerHead, answerBody) = try await promise.futureResult.get()
        let lines = answerHead.split(separator: "\r\n")
        let status = lines.first.flatMap { $0.split(separator: " ").dropFirst().first }.flatMap { Int($0) } ?? 0
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2 { headers[parts[0].lowercased()] = parts[1].trimmingCharacters(in: .whitespaces) }
        }
        return Answer(status: status, headers: headers, body: answerBody, channel: channel)
    }

    /// A WebSocket upgrade request's head for `/ws`, with an optional `X-Forwarded-For`.
    static func upgradeHead(forwardedFor: String? = nil) -> String {
        var lines = [
            "GET /ws HTTP/1.1", "Host: 127.0.0.1", "Connection: Upgrade", "Upgrade: websocket",
            "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        ]
        if let forwardedFor { lines.append("X-Forwarded-For: \(forwardedFor)") }
        return lines.joined(separator: "\r\n")
    }
}
