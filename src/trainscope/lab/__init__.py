"""``trainscope lab``: the classic questions of efficient training, answered in one
document by measuring them on the user's machine (:mod:`.chapters`, :mod:`.runner`,
:mod:`.document`)."""
