//! The channel codec's round trips and its refusals of malformed frames.

use super::*;

fn request() -> WireRequest {
    WireRequest {
        id: 7,
        arrival_ns: 1_000,
        prompt: b"hello world".to_vec(),
        block_hashes: vec![u64::MAX, 3],
        block_ids: Some(vec![0, 1]),
        block_size: 4,
        tokens: false,
        prompt_len: 11,
        output_tokens: Some(16),
        session_id: 2,
        parent_id: 6,
        ends_session: true,
        now_ns: 2_000,
        phase: routerlab_core::abi::RL_PHASE_DECODE,
        cached: Some(vec![(0, 8), (3, 0)]),
        adapter: Some(WireAdapter {
            id: 2,
            name: b"sql-lora".to_vec(),
            states: Some(vec![(
                3,
                AdapterState(RlAdapterState {
                    resident: 1,
                    running: 2,
                    waiting: 3,
                    active: 4,
                    slots_used: 5,
                    slots_total: 6,
                    waiting_adapters: 7,
                    _reserved: 0,
                }),
            )]),
        }),
    }
}

#[test]
fn every_call_and_reply_reads_back_as_written() {
    let load = EndpointLoad {
        running: 1,
        waiting: 2,
        kv_blocks_used: 3,
        kv_blocks_total: 4,
        inflight_prompt_tokens: 5,
        inflight_requests: 6,
        kv_block_tokens: 7,
        lora: routerlab_core::LoraSlots {
            used: 8,
            total: 9,
            active: 10,
            waiting: 11,
        },
    };
    let calls = [
        Call::Decide {
            request: request(),
            loads: vec![(0, Load(load)), (9, Load::default())],
        },
        Call::Learn {
            request: WireRequest {
                block_ids: None,
                output_tokens: None,
                tokens: true,
                cached: None,
                adapter: None,
                ..request()
            },
            index: 3,
        },
        Call::FirstToken {
            request: WireRequest {
                adapter: Some(WireAdapter {
                    id: 1,
                    name: b"a".to_vec(),
                    states: None,
                }),
                ..request()
            },
            index: 1,
        },
        Call::Complete {
            request: request(),
            index: u32::MAX,
        },
        Call::Add {
            name: "host:80".into(),
        },
        Call::Remove { index: 4 },
    ];
    let mut buf = Vec::new();
    for call in calls {
        let mut bytes = Vec::new();
        write_call(&mut bytes, &call).unwrap();
        assert_eq!(read_call(&mut bytes.as_slice(), &mut buf).unwrap(), call);
    }
    let replies = [
        Reply::Hello {
            matcher: "lcp".into(),
            endpoints: vec![("a:1".into(), 0), ("b:2".into(), 1)],
        },
        Reply::Done,
        Reply::Decided {
            endpoint: Some(2),
            constrained: true,
            flagged: vec![0, 1],
        },
        Reply::Decided {
            endpoint: None,
            constrained: false,
            flagged: vec![],
        },
        Reply::Added { index: 5 },
        Reply::Failed {
            message: "boom".into(),
        },
    ];
    for reply in replies {
        let mut bytes = Vec::new();
        write_reply(&mut bytes, &reply).unwrap();
        assert_eq!(read_reply(&mut bytes.as_slice(), &mut buf).unwrap(), reply);
    }
}

#[test]
fn a_long_message_is_cut_at_a_character_boundary() {
    let message = "é".repeat(MAX_MESSAGE_BYTES);
    let mut bytes = Vec::new();
    write_reply(&mut bytes, &Reply::Failed { message }).unwrap();
    let Reply::Failed { message } = read_reply(&mut bytes.as_slice(), &mut Vec::new()).unwrap()
    else {
        panic!("not a failure")
    };
    assert_eq!(message.len(), MAX_MESSAGE_BYTES);
    assert!(message.chars().all(|c| c == 'é'));
}

#[test]
fn malformed_and_oversized_frames_are_refused_without_allocating_for_them() {
    let mut buf = Vec::new();
    let framed = |payload: &[u8]| {
        let mut framed = (payload.len() as u32).to_le_bytes().to_vec();
        framed.extend_from_slice(payload);
        framed
    };
    // A length over the limit: refused before any byte of it is read.
    let huge = (MAX_REPLY_BYTES + 1).to_le_bytes();
    assert!(matches!(
        read_reply(&mut huge.as_slice(), &mut buf),
        Err(WireError::TooLong(..))
    ));
    // A list claiming 4 Gi items in a 9-byte frame: a decision with no endpoint and its
    // list's count forged to u32::MAX, a varint.
    let mut decided = Vec::new();
    write_reply(
        &mut decided,
        &Reply::Decided {
            endpoint: None,
            constrained: false,
            flagged: vec![],
        },
    )
    .unwrap();
    let mut forged = decided[4..decided.len() - 1].to_vec();
    forged.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert_eq!(forged.len(), 8);
    assert!(matches!(
        read_reply(&mut framed(&forged).as_slice(), &mut buf),
        Err(WireError::Malformed(_))
    ));
    // Every proper prefix of a good frame is an error, never a call.
    let mut bytes = Vec::new();
    write_call(
        &mut bytes,
        &Call::Decide {
            request: request(),
            loads: vec![(0, Load::default())],
        },
    )
    .unwrap();
    for cut in 0..bytes.len() {
        assert!(
            read_call(&mut &bytes[..cut], &mut buf).is_err(),
            "cut {cut}"
        );
    }
    // A frame shortened inside while its length still says the whole: malformed.
    let mut short = bytes.clone();
    short.truncate(bytes.len() - 1);
    let len = (short.len() - 4) as u32;
    short[..4].copy_from_slice(&len.to_le_bytes());
    assert!(matches!(
        read_call(&mut short.as_slice(), &mut buf),
        Err(WireError::Malformed(_))
    ));
    // Trailing bytes, and an unknown variant.
    let mut done = Vec::new();
    write_reply(&mut done, &Reply::Done).unwrap();
    let mut trailing = done[4..].to_vec();
    trailing.push(0);
    for payload in [trailing, vec![99]] {
        assert!(matches!(
            read_reply(&mut framed(&payload).as_slice(), &mut buf),
            Err(WireError::Malformed(_))
        ));
    }
}
