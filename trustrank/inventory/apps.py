from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "trustrank.inventory"
    label = "inventory"
