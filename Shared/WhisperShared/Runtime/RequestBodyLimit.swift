import Foundation
import Hummingbird
import NIOCore

/// How every HTTP service answers a body over its bound: at once, 413 `INVALID_PAYLOAD`,
/// `Connection: close`, then the rest of the body is read and dropped (up to `drainBytes`
/// and `drainTime`) so a client that writes everything before it reads is not left
/// blocked. A declared `Content-Length` over `maxBytes` is refused before any route runs;
/// a route's own `collect(upTo:)` bound gives the same answer.
public struct RequestBodyLimit<Context: RequestContext>: RouterMiddleware {
    /// The largest body any route of the service takes.
    public let maxBytes: Int
    public let drainBytes: Int
    public let drainTime: Duration

    public static var standardMaxBytes: Int { 2 << 20 }

    public init(maxBytes: Int = Self.standardMaxBytes, drainBytes: Int = 64 << 20, drainTime: Duration = .seconds(30)) {
        self.maxBytes = maxBytes
        self.drainBytes = drainBytes
        self.drainTime = drainTime
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let declared = request.headers[.contentLength].flatMap({ Int($0) }), declared > maxBytes {
            return answer(rest: BodyReader(request.body))
        }
        // A body may be iterated once: the route reads it through `reader`, and the
        // drain goes on from where the route stopped.
        let reader = BodyReader(request.body)
        var request = request
        request.body = RequestBody(asyncSequence: reader)
        do {
            return try await next(request, context)
        } catch is NIOTooManyBytesError {
            return answer(rest: reader)
        }
    }

    /// The 413 with its JSON body; writing it finishes only once the rest of the request
    /// body was read (or the drain gave up, which closes the connection).
    private func answer(rest: BodyReader) -> Response {
        let json = ["error": ["code": ErrorCode.invalidPayload.rawValue, "message": "the request body is over this endpoint's limit"]]
        let data = (try? JSONSerialization.data(withJSONObject: json, options: [.sortedKeys])) ?? Data()
        let bytes = ByteBuffer(bytes: data)
        let (drainBytes, drainTime) = (self.drainBytes, self.drainTime)
        var headers: HTTPFields = [.contentType: "application/json", .connection: "close"]
        headers[.contentLength] = String(bytes.readableBytes)
        return Response(status: .contentTooLarge, headers: headers, body: ResponseBody(contentLength: bytes.readableBytes) { writer in
            try await writer.write(bytes)
            try await Self.drain(rest, upTo: drainBytes, within: drainTime)
            try await writer.finish(nil)
        })
    }

    /// Reads what is left of the body and drops it; throws (closing the connection) once
    /// more than `limit` bytes came or `time` passed, a client that stalls included.
    static func drain(_ rest: BodyReader, upTo limit: Int, within time: Duration) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                var read = 0
                while let chunk = try await rest.next() {
                    read = read.addingReportingOverflow(chunk.readableBytes).partialValue
                    if read > limit { throw DrainAbandoned() }
                }
            }
            group.addTask {
                try await Task.sleep(for: time)
                throw DrainAbandoned()
            }
            defer { group.cancelAll() }
            try await group.next()
        }
    }

    struct DrainAbandoned: Error {}
}

/// One iterator over a request body, shared by the route that reads it and the drain
/// after it. Used by one task at a time (the route, then the answer's writer), never
/// both at once, which is why the unchecked conformance holds.
final class BodyReader: AsyncSequence, @unchecked Sendable {
    typealias Element = ByteBuffer
    private var iterator: RequestBody.AsyncIterator

    init(_ body: RequestBody) {
        iterator = body.makeAsyncIterator()
    }

    func next() async throws -> ByteBuffer? {
        try await iterator.next()
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        let reader: BodyReader
        func next() async throws -> ByteBuffer? { try await reader.next() }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(reader: self) }
}
