import Testing
@testable import WhisperProtocol
import WhisperShared

@Suite struct FrameDecoderTests {
    let decoder = ClientFrameDecoder()
    let session = String(repeating: "s", count: 43)

    func reject(_ text: String) -> FrameRejection? {
        if case .failure(let rejection) = decoder.decode(Array(text.utf8)) { return rejection }
        return nil
    }

    @Test func nonJSONIsRefusedWithoutARequestId() {
        let rejection = reject("hello {")
        #expect(rejection == FrameRejection(.invalidPayload, "frame is not valid JSON"))
    }

    @Test func aJSONValueThatIsNotAnObjectIsRefused() {
        #expect(reject("[1,2]")?.message == "frame must be a JSON object")
        #expect(reject("\"ping\"")?.code == .invalidPayload)
    }

    @Test func unknownTypeEchoesTheRequestId() {
        let rejection = reject(#"{"type":"teleport","requestId":"r-1","payload":{}}"#)
        #expect(rejection == FrameRejection(.invalidPayload, "unknown frame type", requestId: "r-1"))
    }

    @Test func unsupportedVersionsAreNamed() {
        let protocolRejection = reject(#"{"type":"logout","requestId":"q","payload":{"protocolVersion":9,"cryptoVersion":1,"sessionToken":"\#(session)"}}"#)
        #expect(protocolRejection?.message == "unsupported protocolVersion 9; supported: [1]")
        #expect(protocolRejection?.requestId == "q")
        let cryptoRejection = reject(#"{"type":"logout","payload":{"protocolVersion":1,"cryptoVersion":3,"sessionToken":"\#(session)"}}"#)
        #expect(cryptoRejection?.message == "unsupported cryptoVersion 3; supported: [1, 2]")
    }

    @Test func aVersionFromTheFutureIsRefusedForItsVersionNotItsNewFields() {
        let rejection = reject(#"{"type":"logout","payload":{"protocolVersion":2,"cryptoVersion":1,"somethingNew":true}}"#)
        #expect(rejection?.message.hasPrefix("unsupported protocolVersion 2") == true)
    }

    @Test func schemaViolationsNameTheField() {
        let base = #"{"type":"fetch_pending","requestId":"r","payload":{"protocolVersion":1,"cryptoVersion":1,"sessionToken":"\#(session)""#
        #expect(reject(base + #","limit":"ten"}}"#)?.message == "payload.limit must be an integer")
        #expect(reject(base + #","limit":0}}"#)?.message == "payload.limit must be 1 to 200")
        #expect(reject(base + #","page":2}}"#)?.message == "payload.page is not a field of fetch_pending")
        #expect(reject(#"{"type":"fetch_pending","payload":{"protocolVersion":1,"cryptoVersion":1}}"#)?.message == "payload.sessionToken is required")
    }

    @Test func nestedFieldsAreNamedWithTheirPath() {
        let frame = #"""
        {"type":"send_message","payload":{"protocolVersion":1,"cryptoVersion":1,"sessionToken":"\#(session)",
        "messageId":"6f1d2c3b-4a59-4e8f-9d0c-1b2a3f4e5d6c","from":"WSP-AB3D-EF4G-HJKE","to":"WSP-MN6P-QR7S-TVTG",
        "msgType":"image","timestamp":1,"nonce":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYX","ciphertext":"AAAA",
        "sig":"\#(String(repeating: "A", count: 86))==",
        "attachment":{"objectKey":"att/2026/01/7c6b5a49-3827-4d16-a5f4-e3d2c1b0a998.bin","contentType":"image/jpeg",
        "ciphertextSize":10,"fileNonce":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYX","fileKeyBox":{"nonce":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYX","ciphertext":"short"}}}}
        """#
        #expect(reject(frame)?.message == "payload.attachment.fileKeyBox.ciphertext must be base64 of exactly 48 bytes")
    }

    @Test func aValidFrameDecodesToItsType() throws {
        let result = decoder.decode(Array(#"{"type":"ping","requestId":"abc","payload":{}}"#.utf8))
        let frame = try result.get()
        #expect(frame.type == .ping)
        #expect(frame.requestId == "abc")
        #expect(frame.payload is Ping)
        #expect(frame.sessionToken == nil)
    }

    /// Every frame type has exactly one payload type, found by the type it names; the
    /// privileged ones are those whose payload carries a session token, and the frames
    /// that act for no identity (registration, `ping`, a listener's) carry none.
    @Test func everyFrameTypeHasExactlyOnePayloadType() {
        let named = ClientFrameType.allPayloadTypes.map { $0.frameType }
        #expect(Set(named).count == named.count, "a frame type named by two payload types")
        #expect(Set(named) == Set(ClientFrameType.allCases), "frame types without a payload type: \(Set(ClientFrameType.allCases).subtracting(named))")
        for type in ClientFrameType.allCases {
            #expect(type.payloadType.frameType == type)
        }
        let open: Set<ClientFrameType> = [.registerBegin, .registerProof, .ping, .liveListenOffer, .liveListenRequest, .liveJoining, .liveListenerPacket, .liveDropping,
            .liveProfileGet, .liveProfileRename, .liveProfileShare, .liveProfileJoin, .liveProfileLeave, .liveProfileDelete, .liveProfileConversationsList]
        #expect(Set(ClientFrameType.allCases.filter { !$0.isPrivileged }) == open)
    }

    @Test func privilegedFramesExposeTheirSessionToken() throws {
        let frame = try decoder.decode(Array(#"{"type":"logout","payload":{"protocolVersion":1,"cryptoVersion":1,"sessionToken":"\#(session)"}}"#.utf8)).get()
        #expect(frame.type.isPrivileged)
        #expect(frame.sessionToken == session)
    }

    @Test func updateTokensTellsClearFromUnchanged() throws {
        let frame = try decoder.decode(Array(#"{"type":"update_tokens","payload":{"protocolVersion":1,"cryptoVersion":1,"sessionToken":"\#(session)","voipToken":null}}"#.utf8)).get()
        let payload = try #require(frame.payload as? UpdateTokens)
        #expect(payload.pushToken == .unchanged)
        #expect(payload.voipToken == .clear)
    }

    @Test func serverFramesRoundTrip() throws {
        let bytes = ServerFrameCodec.encodeError(.rateLimited, "slow down", requestId: "r9")
        let frame = try ServerFrameCodec.decode(bytes)
        #expect(frame.type == .error)
        #expect(frame.requestId == "r9")
        #expect(frame.payload(as: ErrorPayload.self) == ErrorPayload(code: .rateLimited, message: "slow down", requestId: "r9"))
    }
}

@Suite struct FormatTests {
    @Test func whisperIDs() {
        #expect(Format.isWhisperID("WSP-AB3D-EF4G-HJKE"))
        #expect(!Format.isWhisperID("WSP-AB3D-EF4G-HJ5"))
        #expect(!Format.isWhisperID("WSP-AB3D-EF4G-HJ1K"), "1 is not in the Base32 alphabet")
        #expect(!Format.isWhisperID("wsp-ab3d-ef4g-hj5k"))
        #expect(!Format.isWhisperID("WSX-AB3D-EF4G-HJ5K"))
        #expect(!Format.isWhisperID("WSP_AB3D-EF4G-HJ5K"))
    }

    @Test func base64OfExactLengths() {
        #expect(Format.isBase64(String(repeating: "A", count: 32), decodedLength: 24))
        #expect(!Format.isBase64(String(repeating: "A", count: 31) + "=", decodedLength: 24))
        #expect(Format.isBase64(String(repeating: "A", count: 43) + "=", decodedLength: 32))
        #expect(!Format.isBase64(String(repeating: "A", count: 44), decodedLength: 32))
        #expect(Format.isBase64(String(repeating: "A", count: 86) + "==", decodedLength: 64))
        #expect(!Format.isBase64(String(repeating: "A", count: 87) + "=", decodedLength: 64))
    }

    @Test func base64Shapes() {
        #expect(Format.isBase64("AAAA"))
        #expect(Format.isBase64("AA=="))
        #expect(Format.isBase64("AAA="))
        #expect(!Format.isBase64(""))
        #expect(!Format.isBase64("A==="))
        #expect(!Format.isBase64("AB=C"))
        #expect(!Format.isBase64("AAA"))
        #expect(!Format.isBase64("AA-_"))
        #expect(Format.decodedLength(ofBase64: "AAAAAA==") == 4)
        // A long value (read in place) and one cut out of a larger string.
        #expect(Format.isBase64(String(repeating: "Ab+/", count: 16_384)))
        #expect(!Format.isBase64(String(repeating: "Ab+/", count: 16_383) + "Ab+!"))
        #expect(Format.isBase64(String("xxAAA=".dropFirst(2))))
    }

    @Test func idsAreLoweredOnlyWhenTheyHaveCapitals() {
        #expect(Format.lowercased("6F1D2C3B-4A59-4E8F-9D0C-1B2A3F4E5D6C") == "6f1d2c3b-4a59-4e8f-9d0c-1b2a3f4e5d6c")
        #expect(Format.lowercased("6f1d2c3b-4a59-4e8f-9d0c-1b2a3f4e5d6c") == "6f1d2c3b-4a59-4e8f-9d0c-1b2a3f4e5d6c")
        #expect(Format.lowercased("ÄBC") == "äbc")
        #expect(Format.lowercased("") == "")
    }

    @Test func uuidsAndGroupIDs() {
        #expect(Format.isUUID("6F1D2C3B-4A59-4E8F-9D0C-1B2A3F4E5D6C"))
        #expect(!Format.isUUID("6f1d2c3b4a594e8f9d0c1b2a3f4e5d6c"))
        #expect(Format.isGroupID("grp-6f1d2c3b-4a59-4e8f-9d0c-1b2a3f4e5d6c"))
        #expect(!Format.isGroupID("grp-6F1D2C3B-4A59-4E8F-9D0C-1B2A3F4E5D6C"))
    }

    @Test func objectKeysAndContentTypes() {
        #expect(Format.isObjectKey("att/2026/01/7c6b5a49-3827-4d16-a5f4-e3d2c1b0a998.bin"))
        #expect(!Format.isObjectKey("att/2026/1/7c6b5a49-3827-4d16-a5f4-e3d2c1b0a998.bin"))
        #expect(!Format.isObjectKey("../2026/01/7c6b5a49-3827-4d16-a5f4-e3d2c1b0a998.bin"))
        #expect(Format.isContentType("application/vnd.oasis.opendocument+zip"))
        #expect(!Format.isContentType("Image/JPEG"))
        #expect(!Format.isContentType("image"))
    }
}
