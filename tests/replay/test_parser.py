from __future__ import annotations

import pytest

from trustrank.parsers.openb import OpenbError, parse_openb_nodes, parse_openb_pods

from .helpers import NODES, PODS

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


def test_bundled_openb_trace_has_the_published_size():
    pods = parse_openb_pods(PODS.read_bytes())
    nodes = parse_openb_nodes(NODES.read_bytes())
    assert len(pods) == 8152
    assert len(nodes) == 1213
    assert sum(n.gpu for n in nodes) == 6212
    shared = [p for p in pods if p.num_gpu == 1 and p.gpu_milli < 1000]
    assert shared and all(0 < p.gpu_milli < 1000 for p in shared)
    never_ran = [p for p in pods if p.scheduled_time is None]
    assert never_ran and all(p.pod_phase == "Pending" for p in never_ran)


def test_bad_number_names_line_and_column():
    data = POD_HEADER + "p0,1000,100,1,500,,LS,Running,0,10,0\np1,abc,100,0,0,,BE,Running,0,10,0\n"
    with pytest.raises(OpenbError, match=r"line 3, column cpu_milli: 'abc' is not an integer"):
        parse_openb_pods(data.encode())


def test_shared_multi_gpu_request_is_refused():
    data = POD_HEADER + "p0,1000,100,2,500,,LS,Running,0,10,0\n"
    with pytest.raises(OpenbError, match=r"line 2, column gpu_milli: .*whole GPUs"):
        parse_openb_pods(data)


def test_missing_column_is_named():
    with pytest.raises(OpenbError, match=r"line 1: missing column\(s\) gpu"):
        parse_openb_nodes("sn,cpu_milli,memory_mib,model\nn0,1000,100,T4\n")


def test_gpu_share_above_one_gpu_is_refused():
    data = POD_HEADER + "p0,1000,100,1,1500,,LS,Running,0,10,0\n"
    with pytest.raises(OpenbError, match=r"line 2, column gpu_milli: 1500 is not in 0..1000"):
        parse_openb_pods(data)


def test_short_row_and_empty_file():
    with pytest.raises(OpenbError, match=r"line 2: 3 fields"):
        parse_openb_nodes("sn,cpu_milli,memory_mib,gpu,model\nn0,1,2\n")
    with pytest.raises(OpenbError, match="empty file"):
        parse_openb_nodes(b"")
