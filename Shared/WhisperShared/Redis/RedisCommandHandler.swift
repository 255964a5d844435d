import NIOCore

/// Commands written together with the promises that their replies complete, in order.
struct RedisOutboundRequest {
    var bytes: ByteBuffer
    var promises: [EventLoopPromise<RESPValue>]
}

/// Matches replies to requests on a pipelined connection: Redis answers in order,
/// so the oldest waiting promise owns the next reply.
final class RedisCommandHandler: ChannelDuplexHandler {
    typealias InboundIn = RESPValue
    typealias OutboundIn = RedisOutboundRequest
    typealias OutboundOut = ByteBuffer

    private var waiting = CircularBuffer<EventLoopPromise<RESPValue>>(initialCapacity: 64)
    private var closed = false
    /// Receives replies no request waits for: on a subscribed connection, Redis pushes
    /// messages and subscription confirmations unasked.
    private let onUnsolicited: (@Sendable (RESPValue) -> Void)?

    init(onUnsolicited: (@Sendable (RESPValue) -> Void)? = nil) {
        self.onUnsolicited = onUnsolicited
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let request = unwrapOutboundIn(data)
        if closed {
            request.promises.forEach { $0.fail(RedisError.connectionClosed) }
            promise?.fail(RedisError.connectionClosed)
            return
        }
        waiting.append(contentsOf: request.promises)
        context.write(wrapOutboundOut(request.bytes), promise: promise)
    }

    /// Flushes wait for the event loop's current batch of tasks: commands written by
    /// many tasks at about the same time leave in one `write(2)` instead of one each.
    private var flushScheduled = false

    func flush(context: ChannelHandlerContext) {
        guard !flushScheduled else { return }
        flushScheduled = true
        let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            bound.value.handler.flushScheduled = false
            bound.value.context.flush()
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let value = unwrapInboundIn(data)
        guard let promise = waiting.popFirst() else {
            if let onUnsolicited {
                onUnsolicited(value)
                return
            }
            // A reply nobody asked for means the stream is out of step: start over.
            context.fireErrorCaught(RedisError.protocolViolation("reply without a request"))
            context.close(promise: nil)
            return
        }
        promise.succeed(value)
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(RedisError.connectionClosed)
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        failAll(RedisError.connectionClosed)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failAll(error)
        context.close(promise: nil)
    }

    private func failAll(_ error: any Error) {
        closed = true
        while let promise = waiting.popFirst() {
            promise.fail(error)
        }
    }
}
