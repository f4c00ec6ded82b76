"""The JSON boundary of the II and the local actor API: the pydantic bodies of Tables 9-15 and
appendices C-D (:mod:`.models`) and the refused operations with their HTTP status and JSON body
(:mod:`.errors`)."""
